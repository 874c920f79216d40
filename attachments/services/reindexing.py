"""Re-chunking ready attachments from their stored pages, after chunking changed (running heads
and footers, headings): no new extraction or OCR. Page texts (and so citations) are untouched,
except that glyph codes of unmapped characters ("(cid:13)"), which extraction drops since
issue 31, are dropped from pages stored before."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from attachments.chunking import chunk_pages
from attachments.models import DocumentChunk, DocumentPage, NoteAttachment
from attachments.pdf.child import GLYPH_CODE
from attachments.pdf.extract import ExtractedPage, Line, PdfError, extract_text
from attachments.pdf.layout import find_boilerplate
from attachments.services.ingestion import _source, chunk_rows, index_text
from notes.indexing import note_index_text
from notes.models import Note

logger = logging.getLogger(__name__)
Status = NoteAttachment.Status


@dataclass(frozen=True)
class Rechunked:
    changed: bool  # the chunks were (or, in a dry run, would be) replaced
    chunks: int
    running_lines: int  # running heads and footers found, all pages together
    styled_pages: int  # pages with line styles (font size, weight) to find headings by
    cleaned_pages: int = 0  # pages whose stored text had glyph codes, dropped now


def without_glyph_codes(text: str, lines: list[list[Any]]) -> tuple[str, list[list[Any]]]:
    """A stored page's text without glyph codes (as extraction gives it now), and its line
    spans moved to match: a span keeps the characters it held, less the codes."""
    kept: list[str] = []
    cuts: list[tuple[int, int]] = []  # (start, end) of each removed code in the old text
    at = 0
    for match in GLYPH_CODE.finditer(text):
        kept.append(text[at : match.start()])
        cuts.append(match.span())
        at = match.end()
    if not cuts:
        return text, lines
    kept.append(text[at:])

    def moved(offset: int) -> int:
        removed = 0
        for start, end in cuts:
            if start >= offset:
                break
            removed += min(end, offset) - start
        return offset - removed

    spans = [[moved(start), moved(end), *rest] for start, end, *rest in lines]
    return "".join(kept), [span for span in spans if span[1] > span[0]]


def _recover_styles(attachment: NoteAttachment) -> dict[tuple[int, str], list[list[Any]]]:
    """Line styles for pages stored without them (before they were kept), read again from the
    PDF by the text children (no OCR); keyed by (page number, text), so they only go to a page
    whose stored text is what extraction gives today. {} for an encrypted or unreadable file."""
    missing = [
        number
        for number, text, lines, is_ocr in DocumentPage.objects.filter(
            attachment=attachment
        ).values_list("number", "text", "lines", "is_ocr")
        if not lines and not is_ocr and text.strip()
    ]
    if not missing:
        return {}
    try:
        extraction = extract_text(_source(attachment), expected_pages=attachment.page_count)
    except (PdfError, OSError) as exc:  # PasswordRequired included: its unlocked copy is gone
        logger.info("attachment %s: no line styles from the PDF (%s)", attachment.pk, exc)
        return {}
    wanted = set(missing)
    return {
        (page.number, page.text): [[ln.start, ln.end, ln.size, ln.bold] for ln in page.lines]
        for page in extraction.pages
        if page.number in wanted and page.lines
    }


def attachment_rechunk(*, attachment_id: int, dry_run: bool = False) -> Rechunked | None:
    """Chunk a ready attachment again from its stored pages, finding running heads, footers and
    headings afresh; None if it is not ready (queued, processing, failed, gone).

    Pages, chunks, keyword index and BM25 postings change in one transaction under the
    attachment's row lock (a reprocess or delete waits; keyword search sees the old chunks or
    the new). New chunks have no vectors: `attachment_reembed` embeds them. Idempotent: when
    the chunks come out the same they are kept, vectors and all. Pages stored without line
    styles get them from the PDF once (see _recover_styles); failing that, headings are found
    by numbering and names alone.
    """
    attachment = NoteAttachment.objects.filter(pk=attachment_id, status=Status.READY).first()
    if attachment is None or attachment.format:
        # A non-PDF source's units are not re-read from PDF layout: nothing to do.
        return None
    styles = _recover_styles(attachment)  # outside the lock: it can take seconds
    with transaction.atomic():
        locked = NoteAttachment.objects.select_for_update().filter(
            pk=attachment_id, status=Status.READY
        )
        if not locked.exists():
            return None
        rows = list(DocumentPage.objects.filter(attachment=attachment).order_by("number"))
        cleaned = 0
        for row in rows:
            text, lines = without_glyph_codes(row.text, row.lines)
            if text != row.text:
                row.text, row.lines = text, lines
                cleaned += 1
            # Keyed by the text as extraction gives it today, glyph codes dropped.
            if not row.lines and (recovered := styles.get((row.number, row.text))):
                row.lines = recovered
        pages = [
            ExtractedPage(row.number, row.text, [Line(*ln) for ln in row.lines], row.is_ocr)
            for row in rows
        ]
        boilerplate = find_boilerplate(pages)
        chunks = chunk_pages(pages, boilerplate)
        old = list(
            DocumentChunk.objects.filter(attachment=attachment)
            .order_by("index")
            .values_list("page_number", "start_char", "end_char", "heading_path", "metadata")
        )
        new = [
            (c.page_number, c.start, c.end, c.heading_path, {"table": True} if c.is_table else {})
            for c in chunks
        ]
        # No chunks at all would leave a ready file unsearchable: keep the old ones then.
        # Cleaned pages change the chunks' text even where their offsets stay the same.
        changed = bool(chunks) and (old != new or cleaned > 0)
        result = Rechunked(
            changed=changed,
            chunks=len(chunks) if changed else len(old),
            running_lines=sum(len(spans) for spans in boilerplate.running.values()),
            styled_pages=sum(bool(row.lines) for row in rows),
            cleaned_pages=cleaned,
        )
        if dry_run:
            return result
        for row in rows:
            row.running = [list(span) for span in boilerplate.running.get(row.number, [])]
        DocumentPage.objects.bulk_update(rows, ["text", "lines", "running"], batch_size=500)
        if changed:
            DocumentChunk.objects.filter(attachment=attachment).delete()
            DocumentChunk.objects.bulk_create(chunk_rows(attachment, chunks), batch_size=500)
            index_text(attachment, attachment.language, attachment.search_config)
    return result


def keywords_rebuild(*, attachment_ids: list[int] | None = None, notes: bool = True) -> int:
    """Every ready file's keyword index (tsvectors, lengths, posting lists) built again from
    its chunks as ingestion builds it now (index_text: the title, section and text fields with
    today's BM25 weights), and every note's; nothing is extracted or embedded. The number of
    files."""
    ready = NoteAttachment.objects.filter(status=Status.READY)
    if attachment_ids is not None:
        ready = ready.filter(pk__in=attachment_ids)
    done = 0
    for attachment in ready.order_by("pk").only("pk", "original_name", "language", "search_config"):
        with transaction.atomic():
            index_text(attachment, attachment.language, attachment.search_config)
        done += 1
    if notes:
        for pk in Note.objects.order_by("pk").values_list("pk", flat=True):
            note_index_text(note_id=pk)
    return done
