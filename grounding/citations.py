"""Citations: which [n] markers an answer uses and whether each quote really occurs, verbatim
up to whitespace, in the cited page's (or note's) text."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit

from markdown_it.common.normalize_url import normalizeLinkText

from attachments.models import DocumentPage
from core.markdown import link_targets, plain_text
from core.textutil import unhyphenated
from notes.indexing import note_search_text
from notes.models import Note

MARKER = re.compile(r"\[(\d{1,3})\]")


def normalise(text: str) -> str:
    return " ".join(text.split())


def quotable(text: str) -> str:
    """What a quote of `text` is looked for in: `text` normalised, and again with the words
    the layout cut at line ends whole ("com-\nmands": the offline answer quotes "commands", a
    model may quote either), joined by a newline that no normalised quote can span."""
    joined = unhyphenated(text)
    if joined == text:
        return normalise(text)
    return f"{normalise(text)}\n{normalise(joined)}"


def cited_numbers(content: str) -> list[int]:
    """The citation numbers used in an answer, in order of first use."""
    seen: list[int] = []
    for match in MARKER.finditer(content):
        n = int(match.group(1))
        if n not in seen:
            seen.append(n)
    return seen


def source_text(source: dict[str, Any]) -> str:
    """The full text a quote must be found in: the page for a PDF passage, the note's title
    and body for a note (read again now, not from what the tool returned)."""
    if source["kind"] == "document":
        page = (
            DocumentPage.objects.filter(
                attachment_id=source["attachment_id"], number=source["page"]
            )
            .values_list("text", flat=True)
            .first()
        )
        return page or ""
    note = Note.objects.filter(pk=source["note_id"]).values_list("title", "body").first()
    # A note is quoted as its Markdown source or as the plain text a reader sees.
    if note is None:
        return ""
    source_text = note_search_text(note[0], note[1])
    return f"{source_text}\n{plain_text(source_text)}"


def verify(
    content: str, sources: list[dict[str, Any]], quotes: dict[int, list[str]]
) -> tuple[list[dict[str, Any]], int]:
    """(citations to show, number refused). A citation is shown when its number names a
    source and its quote occurs in that source's text; every verified quote of a source is
    kept (one citation each), and a cited source with none is refused once."""
    shown: list[dict[str, Any]] = []
    refused = 0
    texts: dict[int, str] = {}
    for n in cited_numbers(content):
        if not 1 <= n <= len(sources):
            refused += 1
            continue
        source = sources[n - 1]
        if n not in texts:
            texts[n] = quotable(source_text(source))
        verified = list(
            dict.fromkeys(
                normalise(q) for q in quotes.get(n, []) if normalise(q) and normalise(q) in texts[n]
            )
        )
        if not verified:
            refused += 1
            continue
        for quote in verified:
            citation = {"n": n, "kind": source["kind"], "quote": quote}
            for key in ("attachment_id", "file", "page", "where", "chunk_id", "note_id",
                        "note_title"):  # fmt: skip
                if key in source:
                    citation[key] = source[key]
            shown.append(citation)
    return shown, refused


def vouching_text(source: dict[str, Any]) -> str:
    """The text of a cited source whose URLs an answer may link: the page for a PDF passage;
    for a note, what a reader sees of it outside code, and its links' targets. A URL a note
    holds only as code vouches for nothing: that is how a saved answer keeps the URLs it did
    not show as links (chat.saving), and a later answer quoting it must not link them."""
    if source["kind"] == "document":
        return source_text(source)
    note = Note.objects.filter(pk=source["note_id"]).values_list("title", "body").first()
    if note is None:
        return ""
    text = note_search_text(note[0], note[1])
    return "\n".join([plain_text(text, code=False), *link_targets(text)])


def allowed_links(content: str, *, question: str, citations: list[dict[str, Any]]) -> list[str]:
    """The links of an answer that may be shown as links (render_markdown's `links`): http(s)
    and mailto links whose URL occurs verbatim in the question or in the vouching_text of a
    verified cited source. Anything else the model wrote, a URL carrying the user's text to
    another site for one, is shown as text."""
    if not (targets := link_targets(content)):
        return []
    cited = {
        (c.get("kind"), c.get("attachment_id"), c.get("page"), c.get("note_id")): c
        for c in citations
    }
    texts = [question, *(vouching_text(citation) for citation in cited.values())]
    allowed = []
    for href in targets:
        scheme = urlsplit(href).scheme.lower()
        if scheme not in ("http", "https", "mailto"):
            continue  # a relative URL ("/", "a") would occur in almost any text
        forms = {href, unquote(href), normalizeLinkText(href)}
        if scheme == "mailto":
            forms |= {form.partition(":")[2] for form in forms}
        if any(form and form in text for form in forms for text in texts):
            allowed.append(href)
    return allowed


def renumber(content: str, citations: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Citations numbered 1..n in order of first use, one per number (its first verified
    quote), with the answer's markers rewritten to match; markers that were not verified are
    dropped from the text (the page says how many there were)."""
    first: dict[int, dict[str, Any]] = {}
    for citation in citations:
        first.setdefault(int(citation["n"]), citation)
    order = [n for n in cited_numbers(content) if n in first]
    new = {old: i for i, old in enumerate(order, start=1)}

    def swap(match: re.Match[str]) -> str:
        n = new.get(int(match.group(2)))
        return f"{match.group(1)}[{n}]" if n is not None else ""

    text = re.sub(r"(\s*)\[(\d{1,3})\]", swap, content)
    # A marker repeated right after itself ("[1][1]") reads as one.
    text = re.sub(r"(\[\d{1,3}\])(?:\s*\1)+", r"\1", text)
    return text, [{**first[old], "n": new[old]} for old in order]
