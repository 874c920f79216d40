"""How a saved message is shown: the answer's Markdown rendered and sanitized, its [n] markers
turned into citation chips (verified citations only), each linking to the PDF at its page and
to the page text with the quote marked. A document citation's links also carry what the PDF
viewer panel (static/js/viewer.js) needs as data-viewer-* attributes; without JavaScript they
are plain links.

The chips go into the sanitized HTML afterwards, and only into text nodes: a marker inside a
link title or code never becomes markup, and nothing from the model is trusted on the way.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from html import escape
from html.parser import HTMLParser
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from attachments.validation import UPLOAD_TYPES, SourceKind
from chat.claims import CLOSE, OPEN, clean, unbacked_spans
from chat.models import Message
from core.markdown import render_markdown
from grounding.citations import MARKER
from notes.models import Role
from notes.selectors import notebook_role, role_allows

IN_PROGRESS = (Message.Status.PENDING, Message.Status.STREAMING)
FAILED = (Message.Status.ERROR, Message.Status.INTERRUPTED)
# Markers in these stay as they are: a chip inside a link or in code would be wrong.
_NO_CHIPS = frozenset({"a", "code", "pre"})
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "wbr"})


@dataclass(frozen=True)
class Source:
    """A verified citation as the page shows it."""

    n: int
    kind: str  # "document" | "note"
    label: str  # file name or note title
    page: int | None
    quote: str
    open_url: str  # the PDF at its page, or the note
    text_url: str  # the page text with the quote highlighted, or the note
    file_url: str = ""  # the PDF itself (no #page), for the viewer panel; "" for a note
    image: bool = False  # an image source: the viewer shows the image, not PDF.js
    # A non-PDF source's unit ("Slide 3", "12:34", a section): opened in the reader view.
    where: str = ""

    @property
    def viewer_attrs(self) -> SafeString:
        """The data-viewer-* attributes (with a leading space) that let a click on a document
        citation open the viewer panel at the cited page with the quote highlighted; empty for
        a note, whose links stay plain. Every value is escaped for an attribute."""
        if self.kind != "document" or not self.file_url:
            return SafeString("")
        return format_html(
            ' data-viewer-file="{}" data-viewer-page="{}" data-viewer-quote="{}"'
            ' data-viewer-title="{}" data-viewer-text="{}"{}',
            self.file_url,
            self.page,
            self.quote,
            self.label,
            self.text_url,
            SafeString(' data-viewer-image="1"') if self.image else "",
        )


@dataclass(frozen=True)
class MessageView:
    message: Message
    html: SafeString = field(default_factory=lambda: SafeString(""))
    sources: list[Source] = field(default_factory=list)
    # The offline answer's further passages (or, beside an abstention, its closest matches).
    related: list[Source] = field(default_factory=list)

    @property
    def in_progress(self) -> bool:
        return self.message.status in IN_PROGRESS

    @property
    def failed(self) -> bool:
        return self.message.status in FAILED

    @cached_property
    def can_save(self) -> bool:
        """Whether "Save to note" is offered: the conversation's owner (the only one who sees
        it) may write notes in its notebook (not a viewer of a shared one)."""
        conversation = self.message.conversation
        role = notebook_role(user=conversation.owner, notebook=conversation.notebook)
        return role_allows(role, Role.EDITOR)

    @property
    def unbacked(self) -> int:
        """How many sentences of the finished answer no source backs (chat.claims)."""
        if self.message.status != Message.Status.COMPLETE:
            return 0
        return len(unbacked_spans(self.message.metadata, self.message.content))

    @property
    def activity(self) -> str:
        """The last tool the answer used ("Searching documents for ‘…’"), for the status line."""
        calls = self.message.tool_calls or []
        return activity(calls[-1] if calls and isinstance(calls[-1], dict) else {})


_READING_NOTE = re.compile(r"\AReading note ‘(.*)’\Z", re.DOTALL)


def activity(call: dict[str, Any]) -> str:
    """What a tool call is doing, in the active language, from its name and arguments (the
    `summary` the tool wrote is English and saved; it stays the fallback for other tools)."""
    summary = str(call.get("summary", ""))
    arguments = call.get("arguments")
    query = arguments.get("query") if isinstance(arguments, dict) else None
    name = call.get("name")
    if name == "document_search" and isinstance(query, str):
        return _("Searching documents for ‘%(query)s’") % {"query": query[:80]}
    if name == "note_search" and isinstance(query, str):
        return _("Searching notes for ‘%(query)s’") % {"query": query[:80]}
    if name == "note_read" and (reading := _READING_NOTE.match(summary)):
        return _("Reading note ‘%(title)s’") % {"title": reading.group(1)}
    return summary


def page_label(label: str, page: int | None, where: str = "") -> str:
    """“file.pdf, page 3”, “slides.pptx, Slide 3”, “talk.vtt, 12:34” (or the note's title,
    which has no pages)."""
    if where:
        return _("%(file)s, %(where)s") % {"file": label, "where": where}
    if not page:
        return label
    return _("%(file)s, page %(page)s") % {"file": label, "page": page}


def _source(
    message: Message, citation: dict[str, Any], images: frozenset[int] = frozenset()
) -> Source | None:
    try:
        n = int(citation["n"])
        quote = str(citation.get("quote", ""))
        if citation.get("kind") == "document":
            page = int(citation["page"])
            attachment_id = int(citation["attachment_id"])
            file_url = reverse("attachments:download", args=[attachment_id])
            text_url = (
                reverse("attachments:pages", args=[attachment_id])
                + "?"
                + urlencode({"page": page, "quote": quote})
                + "#quote"
            )
            if where := str(citation.get("where") or ""):  # read in the reader view, marked
                return Source(n=n, kind="document", label=str(citation.get("file", "")),
                              page=page, quote=quote, open_url=text_url, text_url=text_url,
                              where=where)  # fmt: skip
            return Source(
                n=n,
                kind="document",
                label=str(citation.get("file", "")),
                page=page,
                quote=quote,
                open_url=file_url if attachment_id in images else f"{file_url}#page={page}",
                file_url=file_url,
                image=attachment_id in images,
                text_url=reverse("attachments:pages", args=[attachment_id])
                + "?"
                + urlencode({"page": page, "quote": quote})
                + "#quote",
            )
        note_url = reverse("attachments:note_detail", args=[int(citation["note_id"])])
        return Source(
            n=n,
            kind="note",
            label=str(citation.get("note_title", "")),
            page=None,
            quote=quote,
            open_url=note_url,
            text_url=note_url,
        )
    except (KeyError, TypeError, ValueError):  # a malformed row shows as unverified
        return None


def _image_ids(citations: list[dict[str, Any]]) -> frozenset[int]:
    """Which of the cited attachments are images. The extension decided that at upload
    (attachments.validation.upload_kind: an image's name ends in an image extension, and a
    file under such a name that is not an image was refused), so the cited file's name says
    it, without a query."""

    ids = set()
    for citation in citations:
        suffix = PurePosixPath(str(citation.get("file", ""))).suffix.lower()
        if citation.get("kind") == "document" and UPLOAD_TYPES.get(suffix) is SourceKind.IMAGE:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                ids.add(int(citation["attachment_id"]))
    return frozenset(ids)


def sources(message: Message) -> list[Source]:
    """The message's verified citations, in order of number."""
    citations = [c for c in message.citations or [] if isinstance(c, dict)]
    images = _image_ids(citations)
    found = (_source(message, c, images) for c in citations)
    return sorted((s for s in found if s is not None), key=lambda s: s.n)


def _chip(message: Message, source: Source, occurrence: int) -> str:
    where = page_label(source.label, source.page, source.where)
    text_link = (
        format_html(' · <a href="{}">{}</a>', source.text_url, _("Show in the page text"))
        if source.kind == "document" and not source.where
        else ""
    )
    open_label = (
        _("Open at %(where)s") % {"where": source.where}
        if source.where
        else _("Open the image")
        if source.image
        else _("Open the PDF at page %(page)s") % {"page": source.page}
        if source.page
        else _("Open the note")
    )
    return format_html(
        '<span class="cite" data-n="{n}">'
        '<a class="cite-chip" href="{open}" target="_blank" rel="noopener" '
        'aria-describedby="cite-{m}-{k}"{viewer} data-testid="citation-chip">{n}</a>'
        '<span class="cite-card" role="tooltip" id="cite-{m}-{k}">'
        '<span class="cite-where">{where}</span> <q class="cite-quote">{quote}</q> '
        '<span class="cite-links"><a href="{open}" target="_blank" rel="noopener">{open_label}</a>'
        "{text_link}</span></span></span>",
        n=source.n,
        m=message.pk,
        k=occurrence,
        open=source.open_url,
        viewer=source.viewer_attrs,
        where=where,
        quote=source.quote,
        open_label=open_label,
        text_link=text_link,
    )


def _unbacked_flag() -> str:
    return format_html(
        ' <span class="claim-flag" data-testid="claim-unbacked" title="{}">{}</span>',
        _("No passage of your sources says this. Check it before relying on it."),
        _("not found in the sources"),
    )


def _unverified(n: str) -> str:
    title = _("This citation could not be checked against the source, so it is not linked.")
    return f'<span class="cite-unverified" title="{escape(title)}">[{escape(n)}]</span>'


class _ChipWriter(HTMLParser):
    """Re-emits sanitized HTML as it is, replacing [n] in text nodes (outside links and code)."""

    def __init__(self, message: Message, shown: list[Source]) -> None:
        super().__init__(convert_charrefs=True)
        self.message = message
        # A source may be quoted more than once: the k-th [n] shows its k-th quote.
        self.sources: dict[int, list[Source]] = {}
        for source in shown:
            self.sources.setdefault(source.n, []).append(source)
        self.seen: dict[int, int] = {}
        # The extractive answer's verified quote is the sentences of its passage that
        # answer: they are highlighted where the passage shows them.
        self.highlight = (
            [s.quote for s in shown if s.quote] if message.answerer == "extractive" else []
        )
        self.chips = 0
        self.out: list[str] = []
        self.skip = 0
        self.unbacked = False  # inside a sentence the sources do not back

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.out.append(clean(self.get_starttag_text() or ""))
        if tag in _NO_CHIPS and tag not in _VOID:
            self.skip += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.out.append(clean(self.get_starttag_text() or ""))

    def handle_endtag(self, tag: str) -> None:
        self.out.append(f"</{tag}>")
        if tag in _NO_CHIPS and self.skip:
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        # An unbacked sentence runs from OPEN to CLOSE, over any inline markup between: each
        # piece of its text is marked, and a flag follows its end.
        for piece in re.split(f"([{OPEN}{CLOSE}])", data):
            if piece == OPEN:
                self.unbacked = True
            elif piece == CLOSE:
                self.unbacked = False
                self.out.append(_unbacked_flag())
            elif piece and self.unbacked:
                self.out.append('<span class="claim-unbacked">')
                self._text(piece)
                self.out.append("</span>")
            elif piece:
                self._text(piece)

    def _text(self, data: str) -> None:
        if self.skip:
            self.out.append(escape(data, quote=False))
            return
        for quote in self.highlight:
            if len(quote) >= 12 and quote in data:
                before, _sep, after = data.partition(quote)
                self._chips(before)
                self.out.append('<mark class="answer-quote">')
                self._chips(quote)
                self.out.append("</mark>")
                self._chips(after)
                return
        self._chips(data)

    def _chips(self, data: str) -> None:
        pos = 0
        for match in MARKER.finditer(data):
            self.out.append(escape(data[pos : match.start()], quote=False))
            n = int(match.group(1))
            quotes = self.sources.get(n)
            if not quotes:
                self.out.append(_unverified(match.group(1)))
            else:
                source = quotes[min(self.seen.get(n, 0), len(quotes) - 1)]
                self.seen[n] = self.seen.get(n, 0) + 1
                self.chips += 1
                self.out.append(_chip(self.message, source, self.chips))
            pos = match.end()
        self.out.append(escape(data[pos:], quote=False))


def shown_links(message: Message) -> list[str]:
    """The URLs the answer shows as links: those the finished answer was allowed
    (grounding.citations.allowed_links); an older or unfinished answer has none."""
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    links = metadata.get("links")
    return [link for link in links if isinstance(link, str)] if isinstance(links, list) else []


def marked(message: Message) -> str:
    """The answer's Markdown with OPEN and CLOSE around each sentence no source backs
    (`metadata.claims`); any such character the model wrote is removed first."""
    content = clean(message.content)
    if content != message.content:
        return content
    out, pos = [], 0
    for start, end in unbacked_spans(message.metadata, content):
        out += [content[pos:start], OPEN, content[start:end], CLOSE]
        pos = end
    out.append(content[pos:])
    return "".join(out)


def answer_html(message: Message, shown: list[Source] | None = None) -> SafeString:
    """The answer's Markdown as sanitized HTML with a chip for each verified citation; other
    markers stay plain, muted text. Only its shown_links are links."""
    if shown is None:
        shown = sources(message)
    html = render_markdown(marked(message), links=shown_links(message))
    writer = _ChipWriter(message, shown)
    writer.feed(html)
    writer.close()
    return mark_safe("".join(writer.out))  # noqa: S308 - nh3 output; chips built with format_html


def present(message: Message) -> MessageView:
    """Everything the message partial needs."""
    if message.role != Message.Role.ASSISTANT or message.status in IN_PROGRESS:
        return MessageView(message)
    shown = sources(message) if message.status == Message.Status.COMPLETE else []
    return MessageView(message, answer_html(message, shown), shown, related(message))


def related(message: Message) -> list[Source]:
    """The further passages an offline answer lists (metadata["related"]), as links that open
    the source at the passage with its sentence highlighted."""
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    rows = [r for r in metadata.get("related") or [] if isinstance(r, dict)]
    images = _image_ids(rows)
    found = (_source(message, {**row, "n": 0}, images) for row in rows)
    return [s for s in found if s is not None]
