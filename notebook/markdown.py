"""Markdown → safe HTML for notes and model output: markdown-it-py, then an nh3 allowlist."""

from __future__ import annotations

from functools import cache

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererHTML
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


def _image_as_link(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # Images become plain links to their source: the reader decides whether to load them.
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    src = str(token.attrGet("src") or "")
    # Inside a link ([![alt](src)](href)) a second link would split the first one: the
    # image's alt text stays as the link's text instead.
    depth = sum({"link_open": 1, "link_close": -1}.get(t.type, 0) for t in tokens[:idx])
    if depth > 0:
        return escapeHtml(alt or src)
    return f'<a href="{escapeHtml(src)}">{escapeHtml(alt or src)}</a>'


@cache
def _parser() -> MarkdownIt:
    # "html": False turns raw HTML in the source into text; nh3 is the second line of defence.
    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
        ["table", "strikethrough"]
    )
    md.add_render_rule("image", _image_as_link)
    return md


def render_markdown(source: str) -> SafeString:
    """Render untrusted Markdown to HTML that is safe to put in a page."""
    html = _parser().render(source or "")
    clean = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=ALLOWED_URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )
    return mark_safe(clean)  # noqa: S308 - sanitized by nh3 just above
