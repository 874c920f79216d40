from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from core.markdown import plain_text, render_markdown

register = template.Library()


@register.filter(name="markdown")
def markdown_filter(source: str) -> SafeString:
    return render_markdown(source)


@register.filter(name="plain")
def plain_filter(source: str) -> str:
    """Markdown as a reader sees it, on one line: for snippets
    (`{{ note.body|plain|truncatechars:160 }}`)."""

    return " ".join(plain_text(source).split())
