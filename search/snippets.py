"""What a person reads of a search hit: the passage's readable text (a note's Markdown as plain
text), a window of it around the first query word, and that window with the query's words
marked. Document text is untrusted: every piece is escaped before <mark> wraps a match."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from core.language import language_of, stop_words
from core.markdown import plain_text
from core.textutil import cjk_ratio, unhyphenated

if TYPE_CHECKING:
    from search.retrieval import Hit

SNIPPET_CHARS = 320


def query_pattern(query: str) -> re.Pattern[str] | None:
    """The query's words worth marking (not its language's stop words, unless it has nothing
    else: "page numbers" are both English stop words), longest first, as whole-word prefixes
    ("file" marks "files"); CJK has no word boundaries, so its terms match anywhere."""
    found = {w for w in re.findall(r"\w+", query.lower()) if cjk_ratio(w) or len(w) >= 2}
    stop = stop_words(language_of(query))
    words = sorted(
        {w for w in found if cjk_ratio(w) or w not in stop} or found, key=len, reverse=True
    )
    if not words:
        return None
    alternatives = [re.escape(w) if cjk_ratio(w) else rf"\b{re.escape(w)}\w*" for w in words]
    return re.compile("|".join(alternatives), re.IGNORECASE)


def readable_text(hit: Hit) -> str:
    """A hit's text as a reader sees it: a PDF passage as extracted with the words the layout
    cut at line ends whole ("commands", not "com- mands"), a note's body without its Markdown
    (its title is shown as the hit's name), one line per block joined by " · "."""
    if hit.chunk is not None:
        return " ".join(unhyphenated(hit.chunk.content).split())
    lines = plain_text(hit.note.body).splitlines()
    return " · ".join(lines) if lines else hit.note.title


def window(text: str, query: str, *, width: int = SNIPPET_CHARS) -> tuple[str, bool, bool]:
    """About `width` characters of `text` around the first query word, cut at spaces where
    there are any; and whether text was left out before and after."""
    pattern = query_pattern(query)
    start = 0
    if pattern and (first := pattern.search(text)):
        start = max(0, first.start() - width // 3)
        if start and (space := text.find(" ", start, first.start())) != -1:
            start = space + 1  # do not open on half a word
    end = min(len(text), start + width)
    if end < len(text) and (space := text.rfind(" ", start + width // 2, end)) != -1:
        end = space
    return text[start:end], start > 0, end < len(text)


def plain_snippet(text: str, query: str, *, width: int = SNIPPET_CHARS) -> str:
    """The window as plain text, "…" where text was left out (for the API)."""
    piece, before, after = window(text, query, width=width)
    return ("…" if before else "") + piece + ("…" if after else "")


def highlight(text: str, query: str, *, width: int = SNIPPET_CHARS) -> SafeString:
    """An escaped snippet of `text` around the first query word, query words in <mark>."""
    piece, before, after = window(text, query, width=width)
    pattern = query_pattern(query)
    parts: list[str] = ["…"] if before else []
    last = 0
    for match in pattern.finditer(piece) if pattern else ():
        parts.append(escape(piece[last : match.start()]))
        parts.append(f"<mark>{escape(match.group(0))}</mark>")
        last = match.end()
    parts.append(escape(piece[last:]))
    if after:
        parts.append("…")
    return mark_safe("".join(parts))  # noqa: S308 - every piece of text is escaped


def heading_text(hit: Hit) -> str:
    """The section a PDF passage sits in ("Chapter 2 › Data frames"), or ""."""
    return " › ".join(hit.chunk.heading_path or []) if hit.chunk is not None else ""
