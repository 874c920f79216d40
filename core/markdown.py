"""Markdown → safe HTML for notes and model output: markdown-it-py, then an nh3 allowlist.

Model output is rendered with an allowlist of links (`links=`): a model that a document
prompt-injected can write a link whose URL carries the user's text to another site, so only
URLs the caller vouches for become anchors; every other URL stays visible as plain text, and an
image is never a link there. Saved into a note (where every link is live), model output keeps
that policy through `inert_links`. Nowhere does a scheme-relative URL ("//host", "/\\host")
become a link: a browser reads it as another site's.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterator
from functools import cache

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.common.normalize_url import normalizeLinkText
from markdown_it.common.utils import MD_TRIM_CHARS, escapeHtml
from markdown_it.renderer import RendererHTML
from markdown_it.rules_core import StateCore
from markdown_it.rules_inline import StateInline
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


def _markdown_it() -> MarkdownIt:
    # "html": False turns raw HTML in the source into text; nh3 is the second line of defence.
    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
        ["table", "strikethrough"]
    )
    md.core.ruler.push("image_in_link", _mark_images_in_links)
    return md


@cache
def _parser() -> MarkdownIt:
    md = _markdown_it()
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


def block_lines(source: str) -> Iterator[tuple[int, int, str]]:
    """The blocks of Markdown that hold running text, as (first line, line after the last,
    kind): "text" for a paragraph (alone, in a list item or a quote), "row" for a table's
    body row. Headings, table heads and code are not among them."""
    in_body = False
    for token in _parser().parse(source or ""):
        if token.type == "tbody_open":
            in_body = True
        elif token.type == "tbody_close":
            in_body = False
        elif token.type == "paragraph_open" and token.map:
            yield token.map[0], token.map[1], "text"
        elif token.type == "tr_open" and in_body and token.map:
            yield token.map[0], token.map[1], "row"


def plain_text(source: str, *, code: bool = True) -> str:
    """The text of Markdown as a reader sees it: no markup, one line per block (headings,
    paragraphs, list items, table cells), code kept verbatim (left out with `code=False`),
    links as their label."""
    out: list[str] = []
    for token in _parser().parse(source or ""):
        if token.type == "inline":
            for child in token.children or []:
                if child.type in ("text", "html_inline") or (code and child.type == "code_inline"):
                    out.append(child.content)
                elif child.type in ("softbreak", "hardbreak"):
                    out.append(" ")
                elif child.type == "image":
                    out.append(child.content)
        elif token.type == "html_block" or (code and token.type in ("fence", "code_block")):
            out.append(token.content.rstrip("\n") + "\n")
        elif token.type in _BLOCK_ENDS:
            out.append("\n")
    lines = (" ".join(line.split()) for line in "".join(out).splitlines())
    return "\n".join(line for line in lines if line)


# --- Model output saved into a note -----------------------------------------------------------

# Characters Markdown gives a meaning to inside a line.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~])")
_BACKSLASH_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
# A URL written out in text, of the schemes an answer's link may have (and a note's text vouch
# for, grounding.citations.allowed_links), up to a space; closing punctuation is not part of it.
_BARE_URL = re.compile(r"(?<![\w/])(?:https?://|mailto:)[^\s<>]+", re.IGNORECASE)
_CLOSING = ".,;:!?'\"*_~"
_OPENING = {")": "(", "]": "[", "}": "{"}
_NEWLINES = re.compile(r"\r\n?")
# The inline rules whose source span inert_links needs, and the token each one makes.
_SPANNED = {"link": "link_open", "image": "image", "autolink": "link_open",
            "backticks": "code_inline"}  # fmt: skip

RuleInline = Callable[[StateInline, bool], bool]


def escape_markdown(text: str) -> str:
    """`text` as Markdown that shows it as it is: no markup, no link."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def _code(text: str) -> str:
    # A backtick percent-encoded (it is a URL): one pair of backticks always closes the span.
    return "`" + text.replace("`", "%60") + "`"


def _bare_urls(text: str) -> Iterator[tuple[int, int]]:
    """Where `text` writes out a URL (start, end), without the punctuation closing a sentence
    or an unopened bracket after it."""
    for match in _BARE_URL.finditer(text):
        url = match.group()
        while url and (
            url[-1] in _CLOSING
            or (url[-1] in _OPENING and url.count(_OPENING[url[-1]]) < url.count(url[-1]))
        ):
            url = url[:-1]
        if not url.lower().endswith(("//", ":")):
            yield match.start(), match.start() + len(url)


def _text_markdown(text: str) -> str:
    """Plain `text` as Markdown that shows it as it is, the URLs in it as code."""
    out, pos = [], 0
    for start, end in _bare_urls(text):
        out += [escape_markdown(text[pos:start]), _code(text[start:end])]
        pos = end
    out.append(escape_markdown(text[pos:]))
    return "".join(out)


def _unlinked_markdown(label: str, url: str) -> str:
    """A link or image that is not one, as _unlinked shows it: its text, then the URL as code
    (the URL alone when there is no text, nothing more when the text is the URL)."""
    shown = normalizeLinkText(url)
    label = " ".join(label.split())
    if not url or label in (url, shown):
        return _text_markdown(label)
    return f"{_text_markdown(label)} ({_code(shown)})" if label else _code(shown)


def _as_text(tokens: list[Token]) -> str:
    """Inline tokens as the text a reader sees, as render_markdown shows a link's or an
    image's text when it is not one."""
    return RendererHTML().renderInlineAsText(tokens, _parser().options, {})


def _spanned(rule: RuleInline, kind: str) -> RuleInline:
    def spanned(state: StateInline, silent: bool) -> bool:
        start, count = state.pos, len(state.tokens)
        if not rule(state, silent):
            return False
        # The rule may first flush pending text: the token it made is the first of its kind.
        made = next((t for t in state.tokens[count:] if t.type == kind), None)
        if not silent and made is not None:
            made.meta["span"] = (start, state.pos)
        return True

    return spanned


@cache
def _span_parser() -> MarkdownIt:
    """render_markdown's parser, noting where in its inline run each link, image and code span
    is written (token.meta["span"]: start and end in the inline token's content)."""
    md = _markdown_it()
    for rule in list(md.inline.ruler.__rules__):
        if rule.name in _SPANNED:
            md.inline.ruler.at(rule.name, _spanned(rule.fn, _SPANNED[rule.name]), {"alt": rule.alt})
    return md


def _line_offsets(
    opener: Token, token: Token, lines: list[str], starts: list[int], cursors: dict[int, int]
) -> list[int] | None:
    """Where in the source each line of an inline token's content starts, or None when that
    cannot be told. A paragraph's lines are the ends of its source lines (block markers cut
    off); a heading's and a table cell's text is found after what came before it."""
    if token.map is None:
        return None
    parts = token.content.split("\n")
    offsets = []
    for j, part in enumerate(parts):
        n = token.map[0] + j
        if n >= len(lines):
            return None
        line = lines[n]
        if opener.type in ("th_open", "td_open"):
            at = line.find(part, cursors.get(n, 0))
        elif opener.type == "heading_open" and opener.markup.startswith("#"):
            at = line.find(part, line.find(opener.markup) + len(opener.markup))
        elif opener.type in ("paragraph_open", "heading_open"):
            end = len(line) if j < len(parts) - 1 else len(line.rstrip(MD_TRIM_CHARS))
            at = end - len(part) if line[:end].endswith(part) else -1
        else:
            return None
        if at < 0:
            return None
        cursors[n] = at + len(part)
        offsets.append(starts[n] + at)
    return offsets


def _edits(text: str, allowed: frozenset[str]) -> list[tuple[int, int, str]] | None:
    """(start, end, replacement) in `text` for each link not in `allowed`, each image and each
    URL written out in the text; None when a span cannot be placed in the source."""
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    md = _span_parser()
    tokens = md.parse(text)
    cursors: dict[int, int] = {}
    edits: list[tuple[int, int, str]] = []
    for i, token in enumerate(tokens):
        if token.type != "inline" or not token.children:
            continue
        offsets = _line_offsets(tokens[i - 1], token, lines, starts, cursors)
        if offsets is None:
            return None
        content = token.content
        breaks = [0] + [m.end() for m in re.finditer("\n", content)]

        def at(k: int, offsets: list[int] = offsets, breaks: list[int] = breaks) -> int:
            j = bisect_right(breaks, k) - 1
            return offsets[j] + k - breaks[j]

        closed: list[tuple[int, int]] = []
        children = token.children
        k, in_link = 0, False
        while k < len(children):
            child = children[k]
            span: tuple[int, int] = child.meta.get("span") or (-1, -1)
            if child.type in ("link_open", "image", "code_inline"):
                if span[0] < 0:
                    return None
                closed.append(span)
            if child.type == "link_open":
                href = str(child.attrGet("href") or "")
                in_link = href in allowed  # its text goes on: an image in it is its alt text
                if not in_link:  # links do not nest: the next close is its own
                    close = next(m for m in range(k + 1, len(children))
                                 if children[m].type == "link_close")  # fmt: skip
                    if child.markup == "autolink":  # <URL>: the URL as code
                        new = _code(content[span[0] + 1 : span[1] - 1])
                    else:
                        label = _as_text(children[k + 1 : close])
                        new = _unlinked_markdown(label, href)
                    edits.append((at(span[0]), at(span[1]), new))
                    k = close
            elif child.type == "link_close":
                in_link = False
            elif child.type == "image":
                alt = _as_text(child.children or [])
                src = str(child.attrGet("src") or "")
                new = _text_markdown(alt or src) if in_link else _unlinked_markdown(alt, src)
                edits.append((at(span[0]), at(span[1]), new))
            k += 1
        for start, end in _bare_urls(content):
            if not any(s < end and start < e for s, e in closed):
                url = _BACKSLASH_ESCAPE.sub(r"\1", content[start:end])
                edits.append((at(start), at(end), _code(url)))
    return edits


def _links_only(source: str, allowed: frozenset[str]) -> bool:
    """Whether `source`, rendered as a note, links only `allowed`, shows no image and writes
    out no URL in its text outside those links."""
    for block in _parser().parse(source):
        depth = 0
        for token in block.children or []:
            if token.type == "image":
                return False
            if token.type == "link_open":
                if str(token.attrGet("href") or "") not in allowed:
                    return False
                depth += 1
            elif token.type == "link_close":
                depth -= 1
            elif token.type == "text" and depth == 0 and next(_bare_urls(token.content), None):
                return False
    return True


def inert_links(source: str, *, links: Collection[str]) -> str:
    """Model output as Markdown that, rendered as a note (where every link is live), links no
    more than render_markdown(source, links=links) does: any other link, and every image, is
    its text with the URL after it as code, and a URL written out in the text is code (so a
    later answer citing the note does not find it there: grounding.citations.allowed_links leaves
    a note's code out). The rest is the source as written. Should a span not be placed in the
    source, the answer's plain text is saved, escaped, its URLs as code."""
    allowed = frozenset(links)
    text = _NEWLINES.sub("\n", source or "").replace("\0", "\ufffd")
    edits = _edits(text, allowed)
    if edits is not None:
        out, end = text, len(text) + 1
        for start, stop, new in sorted(edits, reverse=True):
            if stop > end:  # overlapping spans: never expected, never guessed at
                break
            out, end = out[:start] + new + out[stop:], start
        else:
            if _links_only(out, allowed):
                return out
    return "\n\n".join(_text_markdown(line) for line in plain_text(text).splitlines())
