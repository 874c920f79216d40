"""Markdown → safe HTML for notes and model output: markdown-it-py, then an nh3 allowlist.

Model output is rendered with an allowlist of links (`links=`): a model that a document
prompt-injected can write a link whose URL carries the user's text to another site, so only
URLs the caller vouches for become anchors; every other URL stays visible as plain text, and an
image is never a link there. Nowhere does a scheme-relative URL ("//host", "/\\host") become a
link: a browser reads it as another site's.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from functools import cache

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.common.normalize_url import normalizeLinkText
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererHTML
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5",
    "h6", "hr", "i", "kbd", "li", "ol", "p", "pre", "s", "strong", "sub", "sup", "table",
    "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
# No <img>: a remote image would leak that the note was opened to whoever hosts it.
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "abbr": {"title"},
    "code": {"class"},
    "ol": {"start"},
    "td": {"align"},
    "th": {"align"},
}
ALLOWED_URL_SCHEMES = {"http", "https", "mailto"}
# The env key holding the hrefs that may become anchors; absent for notes (every link may).
_ALLOWED = "notebook_allowed_links"


def _unlinked(label: str, url: str) -> str:
    """What a link or image that is not rendered as one shows after its text, escaped:
    ` (url)`, the URL alone when there is no text, nothing when the text is the URL."""
    shown = normalizeLinkText(url)
    label = label.strip()
    if not url or label in (url, shown):
        return ""
    return escapeHtml(f" ({shown})" if label else shown)


def _image_as_link(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # Images become plain links to their source: the reader decides whether to load them.
    # In model output they are text: an image is what an injected instruction asks for.
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    src = str(token.attrGet("src") or "")
    # Inside a link ([![alt](src)](href)) a second link would split the first one: the
    # image's alt text stays as the link's text instead (marked by _mark_images_in_links).
    if token.meta.get("in_link"):
        return escapeHtml(alt or src)
    if _ALLOWED in env:
        return escapeHtml(alt) + _unlinked(alt, src)
    return f'<a href="{escapeHtml(src)}">{escapeHtml(alt or src)}</a>'


def _link_open(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # Autolinks (<https://…>) and reference links come here too, with the href normalised.
    href = str(tokens[idx].attrGet("href") or "")
    if _ALLOWED not in env or href in env[_ALLOWED]:
        return self.renderToken(tokens, idx, options, env)
    # Links do not nest: the next link_close is this link's. Its text renders as usual, and
    # the close appends the URL as text.
    close = next((i for i in range(idx + 1, len(tokens)) if tokens[i].type == "link_close"), -1)
    if close < 0:
        return ""
    label = self.renderInlineAsText(tokens[idx + 1 : close], options, env)
    autolink = tokens[idx].markup == "autolink"  # its text is the URL
    tokens[close].meta["unlinked_suffix"] = "" if autolink else _unlinked(label, href)
    return ""


def _link_close(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    if "unlinked_suffix" in tokens[idx].meta:
        return str(tokens[idx].meta["unlinked_suffix"])
    return self.renderToken(tokens, idx, options, env)


def _mark_images_in_links(state: StateCore) -> None:
    """Mark images inside links, in one pass over each inline run (counting the links before
    every image made a paragraph of images quadratic: 190 s for 199k characters)."""
    for block in state.tokens:
        depth = 0
        for token in block.children or []:
            if token.type == "link_open":
                depth += 1
            elif token.type == "link_close":
                depth -= 1
            elif token.type == "image" and depth > 0:
                token.meta["in_link"] = True


@cache
def _parser() -> MarkdownIt:
    # "html": False turns raw HTML in the source into text; nh3 is the second line of defence.
    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
        ["table", "strikethrough"]
    )
    md.core.ruler.push("image_in_link", _mark_images_in_links)
    md.add_render_rule("image", _image_as_link)
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("link_close", _link_close)
    return md


def _tokens(tokens: list[Token]) -> Iterator[Token]:
    for token in tokens:
        yield token
        yield from _tokens(token.children or [])


def link_targets(source: str) -> list[str]:
    """The hrefs of the links in `source` (inline, reference and autolinks), normalised as
    render_markdown compares them, in order and without repeats. Images are not links."""
    hrefs = (
        str(token.attrGet("href") or "")
        for token in _tokens(_parser().parse(source or ""))
        if token.type == "link_open"
    )
    return list(dict.fromkeys(href for href in hrefs if href))


# What a browser drops from the start of a URL (C0 controls and space) and from anywhere in it
# (tab and line breaks) before reading it.
_URL_LEADING = "".join(map(chr, range(0x21)))
_URL_DROPPED = re.compile(r"[\t\n\r]")


def _same_site(url: str) -> str | None:
    r"""A relative URL kept as it is, or None (the href goes) when a browser would read it as
    another site's: "//host" and what it reads the same, "/\host", "\\host", a tab between
    the slashes, spaces before them (a backslash is a slash to it)."""
    seen = _URL_DROPPED.sub("", url.lstrip(_URL_LEADING)).replace("\\", "/")
    return None if seen.startswith("//") else url


def render_markdown(source: str, *, links: Collection[str] | None = None) -> SafeString:
    """Render untrusted Markdown to HTML that is safe to put in a page.

    `links` None (notes): every link and image becomes an anchor. A collection (model output):
    only links whose href (as link_targets gives it) is in it become anchors; any other link
    shows its text and URL as plain text, and images are always text.
    """
    env: EnvType = {} if links is None else {_ALLOWED: frozenset(links)}
    html = _parser().render(source or "", env)
    clean = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=ALLOWED_URL_SCHEMES,
        url_relative=_same_site,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )
    return mark_safe(clean)  # noqa: S308 - sanitized by nh3 just above


_BLOCK_ENDS = {"paragraph_close", "heading_close", "list_item_close", "th_close", "td_close",
               "tr_close", "blockquote_close"}  # fmt: skip


def plain_text(source: str) -> str:
    """The text of Markdown as a reader sees it: no markup, one line per block (headings,
    paragraphs, list items, table cells), code kept verbatim, links as their label."""
    out: list[str] = []
    for token in _parser().parse(source or ""):
        if token.type == "inline":
            for child in token.children or []:
                if child.type in ("text", "code_inline", "html_inline"):
                    out.append(child.content)
                elif child.type in ("softbreak", "hardbreak"):
                    out.append(" ")
                elif child.type == "image":
                    out.append(child.content)
        elif token.type in ("fence", "code_block", "html_block"):
            out.append(token.content.rstrip("\n") + "\n")
        elif token.type in _BLOCK_ENDS:
            out.append("\n")
    lines = (" ".join(line.split()) for line in "".join(out).splitlines())
    return "\n".join(line for line in lines if line)
