"""The ingestion pipeline: claim → extract → OCR → chunk → index → embed, plus re-embedding
and the reaper. Runs in django-q2 workers (attachments.tasks)."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import F
from django.db.models.functions import Coalesce, Now
from django.utils import timezone
from django_q.exceptions import TimeoutException

from attachments import signals
from attachments.chunking import Chunk, chunk_pages, provisional_chunks
from attachments.formats import FormatError, Unit, registry
from attachments.models import (
    ChunkVector,
    DocumentChunk,
    DocumentPage,
    NoteAttachment,
    PostingList,
)
from attachments.pdf.extract import (
    ExtractedPage,
    Line,
    PasswordRequired,
    PdfError,
    extract_text,
    fast_text,
    ocr_image,
    ocr_pages,
)
from attachments.pdf.layout import Boilerplate, find_boilerplate
from attachments.services import links
from attachments.services.files import enqueue_ingest, unlocked_path
from attachments.services.reuse import (
    COPIED_FIELDS,
    copy_ingested,
    lock_source,
    reusable_source,
)
from attachments.services.scheduling import claim_fairest
from attachments.thumbnails import thumbnail_make
from core import metrics
from core.embeddings import Embedder, EmbeddingError, embedding_model_name, get_embedder
from core.language import (
    SEGMENTED,
    detect_language,
    fields_params,
    fields_tsvector_sql,
    search_config_for,
    segment_for_search,
    term_count_sql,
    word_count_sql,
)

logger = logging.getLogger(__name__)
Status = NoteAttachment.Status
Stage = NoteAttachment.Stage
PROGRESS_INTERVAL = 0.5  # seconds between progress writes
# Passage windows embedded per call while a source is embedded (progress is written between):
# as many as take about EMBED_SLICE_SECONDS at the pace of the call before, between
# EMBED_SLICE_MIN and EMBED_SLICE, at most twice the call before; EMBED_SLICE_FIRST to start.
EMBED_SLICE = 64
EMBED_SLICE_MIN = 8
EMBED_SLICE_FIRST = 16
EMBED_SLICE_SECONDS = 1.0
# How many words a tsvector indexes: the sum of its lexemes' positions (1 if unpositioned).
RETRY_BACKOFF = (30, 120, 600)  # seconds before retrying after a transient failure


class Superseded(Exception):
    """The row was deleted, reset or claimed by a newer run; this run must stop writing."""


class _Run:
    """One ingestion run of one attachment, fenced by the `attempts` value it claimed."""

    def __init__(self, attachment: NoteAttachment) -> None:
        self.attachment = attachment
        self.token = attachment.attempts
        self.timings: dict[str, float] = {}
        self._last_write = 0.0
        self.started = time.monotonic()
        # windows per embedding call (_embed_in_slices)
        self.embed_slice = min(EMBED_SLICE_FIRST, EMBED_SLICE)

    def _rows(self) -> Any:
        return NoteAttachment.objects.filter(
            pk=self.attachment.pk, attempts=self.token, status=Status.PROCESSING
        )

    def update(self, **fields: Any) -> None:
        if not self._rows().update(heartbeat_at=timezone.now(), **fields):
            raise Superseded

    def progress(self, stage: str, current: int, total: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or current >= total or now - self._last_write >= PROGRESS_INTERVAL:
            self._last_write = now
            self.update(stage=stage, progress_current=current, progress_total=total)

    def end(self, **fields: Any) -> None:
        if not self._rows().update(**fields, timings=self.timings, heartbeat_at=timezone.now()):
            raise Superseded
        metrics.observe_ingestion(self.timings, outcome=fields.get("status"))


def attachment_ingest(*, attachment_id: int) -> None:
    """Claim a pending attachment (conditional UPDATE; the fairest waiting one, which may not
    be `attachment_id`: see scheduling.claim_fairest) and run extract → OCR → chunk → embed.

    A file its uploader already has ready (same bytes, same embedding model) is copied from
    that one instead (see reuse.py), in one transaction, and is ready at once.

    Idempotent: pages and chunks are replaced in one transaction, so a re-run leaves exactly one
    set. Permanent problems end `failed` with a reason; transient ones (embedding API busy) are
    retried later with backoff, at most INGEST_MAX_ATTEMPTS runs in all.
    """
    claimed = claim_fairest(attachment_id)
    if claimed is None:
        logger.info("no file to run for attachment %s's task (it is gone, taken or waiting "
                    "out a backoff, and no other is waiting)", attachment_id)  # fmt: skip
        return
    if claimed != attachment_id:
        logger.info("attachment %s's task runs attachment %s: its uploader's turn",
                    attachment_id, claimed)  # fmt: skip
    attachment_id = claimed
    attachment = NoteAttachment.objects.get(pk=attachment_id)
    run = _Run(attachment)
    keep_unlocked = False
    try:
        if _reuse(run):
            _thumbnail(attachment, _source(attachment))
            _after_ready(attachment_id)
            return
        _extract_and_index(run)
        _embed(run)
        started = time.monotonic()
        _thumbnail(attachment, _source(attachment))
        run.timings["thumbnail"] = round(time.monotonic() - started, 3)
        run.end(
            status=Status.READY,
            stage=Stage.DONE,
            progress_current=F("progress_total"),
            ready_at=timezone.now(),
            embedding_model=embedding_model_name(),
        )
        _after_ready(attachment_id)
    except Superseded:
        logger.info("attachment %s run %s was superseded; stopping", attachment_id, run.token)
    except PasswordRequired:
        run.end(
            status=Status.NEEDS_PASSWORD,
            stage=Stage.QUEUED,
            error="This PDF is password-protected. Enter its password to read it.",
        )
    except PdfError as exc:
        run.end(status=Status.FAILED, error=str(exc))
    except EmbeddingError as exc:
        if exc.transient and run.token < settings.INGEST_MAX_ATTEMPTS:
            keep_unlocked = True
            _retry_later(run, str(exc))
        else:
            run.end(status=Status.FAILED, error=f"Embedding failed: {exc}")
    except TimeoutException:
        # django-q's alarm: the task ran past TASK_TIMEOUT and its worker process is replaced
        # next. Fail the file now; left "processing", the reaper would run it again, and it
        # would time out again, INGEST_MAX_ATTEMPTS times.
        logger.error("ingestion of attachment %s ran out of time", attachment_id)
        connection.close()  # the alarm may have interrupted a query half-way
        with contextlib.suppress(Superseded, DatabaseError):
            run.end(
                status=Status.FAILED,
                error=f"Processing took longer than {settings.TASK_TIMEOUT:,} seconds, the "
                "limit, so it was stopped. The file may be too large or too complex to read "
                "here; try a smaller part of it.",
            )
        raise
    except Exception as exc:
        logger.exception("ingestion of attachment %s failed", attachment_id)
        with contextlib.suppress(Superseded):
            run.end(
                status=Status.FAILED,
                error=f"Processing failed unexpectedly ({type(exc).__name__}). "
                "Reprocess to try again; the server log has details.",
            )
        raise
    finally:
        if not keep_unlocked:
            unlocked_path(attachment).unlink(missing_ok=True)


def _reuse(run: _Run) -> bool:
    """Copy the ingested rows of a ready attachment with the same bytes and uploader (see
    reuse.py) and end the run ready, in one transaction under our row's lock and the source's
    (FOR SHARE); False, with nothing written, when there is none to copy from."""
    started = time.monotonic()
    model = embedding_model_name()
    candidate = reusable_source(attachment=run.attachment, model=model)
    if candidate is None:
        return False
    with transaction.atomic():
        if not run._rows().select_for_update().exists():
            raise Superseded
        source = lock_source(source_id=candidate.pk, model=model)
        if source is None:  # deleted or queued again meanwhile: ingest it ourselves
            return False
        copy_ingested(source_id=source.pk, target_id=run.attachment.pk)
        run.timings = {"reuse": round(time.monotonic() - started, 3), "reused_from": source.pk}
        run.end(
            status=Status.READY,
            stage=Stage.DONE,
            progress_current=source.chunk_count,
            progress_total=source.chunk_count,
            ready_at=timezone.now(),
            **{field: getattr(source, field) for field in COPIED_FIELDS},
        )
        if title_words(source.original_name) != title_words(run.attachment.original_name):
            # The copied keyword index holds the source's title (a field of BM25): its own, now.
            index_text(run.attachment, source.language, source.search_config)
    logger.info("attachment %s reused the ingestion of attachment %s in %.2f s",
                run.attachment.pk, source.pk, run.timings["reuse"])  # fmt: skip
    return True


def _thumbnail(attachment: NoteAttachment, source: Path) -> None:
    """Make the source's thumbnail (never fails the run: a missing one is made on request)."""

    try:
        thumbnail_make(attachment=attachment, source=source)
    except Exception:
        logger.exception("thumbnail of attachment %s failed", attachment.pk)


def _after_ready(attachment_id: int) -> None:
    """The layers above are told (attachments.signals): guides write its guide and its
    notebook's, intelligence its profile; neither ever fails the run."""
    signals.source_ready.send(sender=NoteAttachment, attachment_id=attachment_id)


def _retry_later(run: _Run, reason: str) -> None:
    delay = RETRY_BACKOFF[min(run.token, len(RETRY_BACKOFF)) - 1]
    due = timezone.now() + timedelta(seconds=delay)
    run.end(
        status=Status.PENDING,
        error=f"Will retry in {delay} s: {reason}"[:1000],
        not_before=due,
    )
    enqueue_ingest(run.attachment.pk, not_before=due)


def _source(attachment: NoteAttachment) -> Path:
    unlocked = unlocked_path(attachment)
    return unlocked if unlocked.exists() else Path(attachment.file.path)


def _needs_ocr(page: ExtractedPage) -> bool:
    """Little text and an image on the page: probably a scan. (Blank pages have no image;
    a CJK character carries about as much as a short word, so it counts three.)"""
    text = page.text.strip()
    weight = len(text) + 2 * sum(1 for ch in text if "\u3000" <= ch <= "\u9fff")
    return page.has_image and weight < settings.OCR_MIN_CHARS


def _too_large_for_ocr(pages: list[ExtractedPage]) -> str:
    largest = f"{max(p.image_pixels for p in pages) / 1e6:,.0f} megapixels"
    limit = f"{settings.OCR_MAX_IMAGE_PIXELS / 1e6:,.0f} megapixels"
    if len(pages) == 1:
        skipped = f"Page {pages[0].number} was not read by OCR because an image on it has"
    else:
        skipped = f"{len(pages)} pages were not read by OCR because they hold images of up to"
    return f"No text was found in this PDF. {skipped} {largest}; the limit is {limit}."


def _read_image(run: _Run) -> list[ExtractedPage]:
    """An image is one page: its OCR text (RapidOCR in a child, as for scanned pages)."""
    attachment = run.attachment
    run.update(page_count=1)
    run.timings["extract"] = 0.0
    if not settings.OCR_ENABLED:
        raise PdfError("OCR is turned off on this server (OCR_ENABLED), so images cannot be read.")
    started = time.monotonic()
    run.progress(Stage.OCR, 0, 1, force=True)
    try:
        text = ocr_image(
            Path(attachment.file.path),
            on_progress=lambda done, n: run.progress(Stage.OCR, done, n),
        )
    except PdfError as exc:  # the child's messages speak of PDFs
        message = str(exc).replace("The PDF reader", "The image reader")
        raise PdfError(message.replace("The PDF", "The image")) from None
    run.timings["ocr"] = round(time.monotonic() - started, 3)
    if not text.strip():
        raise PdfError(
            "No text was found in this image by OCR. It may contain no readable writing."
        )
    return [ExtractedPage(1, text, is_ocr=True, has_image=True)]


# The sizes a unit's heading line and body lines get, so that the chunker (which ranks
# headings by font size) puts the heading in its chunks' heading path.
UNIT_HEADING_SIZE = 14.0
UNIT_BODY_SIZE = 10.0


def _read_units(run: _Run) -> list[ExtractedPage]:
    """A non-PDF source (attachments.formats): its units as pages, the heading (a unit's
    first line) marked so that chunks carry it in their heading path."""
    attachment = run.attachment
    run.progress(Stage.EXTRACTING, 0, 1, force=True)
    started = time.monotonic()
    try:
        if attachment.source_url:
            units = _read_link(run)
        else:
            units = registry.read_units(attachment.format, Path(attachment.file.path))
    except FormatError as exc:
        raise PdfError(str(exc)) from None
    run.timings["extract"] = round(time.monotonic() - started, 3)
    pages = [unit_page(unit) for unit in units if unit.text.strip()]
    if not pages:
        raise PdfError("No text was found in this file.")
    run.update(page_count=len(pages))
    run.progress(Stage.EXTRACTING, 1, 1, force=True)
    return pages


def _read_link(run: _Run) -> list[Unit]:
    """A link's units, fetched now (each run fetches again: "Re-fetch" is a reprocess): a web
    page through core.fetch (public addresses only, size and time capped), its main text by
    section; a YouTube video's transcript. What was fetched is stored as the source's file
    (the page's HTML, the transcript as WebVTT), so that it can be downloaded and counts
    toward the uploader's quota."""
    attachment = run.attachment
    if attachment.format == "youtube":
        title, units, stored, extension = links.read_youtube(attachment.source_url)
    else:
        title, units, stored, extension = links.read_web_page(attachment.source_url)
    links.store_fetched(attachment, stored, extension=extension, title=title)
    return units


def unit_page(unit: Unit) -> ExtractedPage:
    """A unit as the chunker reads a page: its first line set larger, as a heading."""
    lines, start = [], 0
    for number, line in enumerate(unit.text.split("\n")):
        end = start + len(line)
        if line.strip():
            # A transcript's first line is speech, not a heading.
            heading = number == 0 and len(line) <= 200 and unit.start_seconds is None
            lines.append(
                Line(start, end, UNIT_HEADING_SIZE if heading else UNIT_BODY_SIZE, heading)
            )
        start = end + 1
    return ExtractedPage(
        number=unit.number, text=unit.text, lines=lines, label=unit.label[:300],
        start_seconds=unit.start_seconds,
    )  # fmt: skip


def _extract_and_index(run: _Run) -> None:
    if run.attachment.format:
        pages = _read_units(run)
        _chunk_and_index(run, pages, ocr_count=0, too_large=[], units=True)
        return
    if run.attachment.is_image:
        pages = _read_image(run)
        _chunk_and_index(run, pages, ocr_count=1, too_large=[])
        return
    attachment = run.attachment
    source = _source(attachment)
    _fast_pass(run, source)

    started = time.monotonic()
    extraction = extract_text(
        source,
        expected_pages=attachment.page_count,
        on_progress=lambda done, n: run.progress(Stage.EXTRACTING, done, n),
    )
    pages = extraction.pages
    if not pages:
        # pdfminer skips page-tree nodes it has seen, so a tree that contains itself ends here.
        raise PdfError(
            "The PDF has no pages that can be read: its list of pages is empty or damaged "
            "(for example, it contains itself)."
        )
    run.update(page_count=extraction.page_count)
    run.timings["extract"] = round(time.monotonic() - started, 3)

    started = time.monotonic()
    # An image's declared size says how much memory rendering it takes; a page with one too
    # large (a few KB of Flate can declare 30,000 × 30,000 pixels) is not rendered at all.
    scans = [p for p in pages if _needs_ocr(p)]
    too_large = [p for p in scans if p.image_pixels > settings.OCR_MAX_IMAGE_PIXELS]
    sparse = [p.number for p in scans if p.image_pixels <= settings.OCR_MAX_IMAGE_PIXELS]
    if too_large and settings.OCR_ENABLED:
        logger.warning(
            "attachment %s: %s page(s) not OCR'd, image too large", attachment.pk, len(too_large)
        )
    ocr_count = 0
    if settings.OCR_ENABLED and sparse:
        run.progress(Stage.OCR, 0, len(sparse), force=True)
        texts = ocr_pages(
            source, sparse, on_progress=lambda done, n: run.progress(Stage.OCR, done, n)
        )
        for page in pages:
            text = texts.get(page.number, "")
            if len(text.strip()) > len(page.text.strip()):
                page.text, page.lines, page.is_ocr = text, [], True
                ocr_count += 1
    run.timings["ocr"] = round(time.monotonic() - started, 3)
    _chunk_and_index(run, pages, ocr_count=ocr_count, too_large=too_large)


def _fast_pass(run: _Run, source: Path) -> None:
    """The first pass: PDFium's plain text of every page, stored as provisional pages and
    chunks (`metadata.provisional`) and indexed for keyword search in one transaction, so
    search finds the file (by keywords, quoting the stored page text) within a fraction of a
    second, while the structured pass reads it properly. That pass replaces every row in its
    own transaction (`_chunk_and_index`).

    Nothing of it is required: a file PDFium cannot read, or without a text layer (a scan),
    leaves no rows and waits for the structured pass, which decides the run's fate."""
    attachment = run.attachment
    started = time.monotonic()
    try:
        extraction = fast_text(source, expected_pages=attachment.page_count)
    except PdfError as exc:  # PasswordRequired included: the structured pass says it again
        logger.info("attachment %s: no first pass (%s)", attachment.pk, exc)
        return
    run.timings["fast_text"] = round(time.monotonic() - started, 3)
    chunks = provisional_chunks(extraction.pages)
    if not chunks:
        return
    language = detect_language("\n".join(p.text for p in extraction.pages[:30]))
    config = search_config_for(language)
    with transaction.atomic():
        if not run._rows().select_for_update().exists():
            raise Superseded
        # Provisional rows: should PostgreSQL crash right after this commit, losing it costs
        # nothing (the run is redone), so the commit does not wait for the disk.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
        DocumentChunk.objects.filter(attachment=attachment).delete()
        DocumentPage.objects.filter(attachment=attachment).delete()
        DocumentPage.objects.bulk_create(
            [DocumentPage(attachment=attachment, number=p.number, text=p.text)
             for p in extraction.pages],
            batch_size=500,
        )  # fmt: skip
        rows = chunk_rows(attachment, chunks)
        for row in rows:
            row.metadata = {"provisional": True}
        DocumentChunk.objects.bulk_create(rows, batch_size=500)
        index_text(attachment, language, config)
        run.update(
            page_count=extraction.page_count,
            language=language,
            search_config=config,
            searchable_at=timezone.now(),
        )
    run.timings["fast_pass"] = round(time.monotonic() - started, 3)
    run.timings["searchable"] = round(time.monotonic() - run.started, 3)


def _chunk_and_index(
    run: _Run,
    pages: list[ExtractedPage],
    *,
    ocr_count: int,
    too_large: list[ExtractedPage],
    units: bool = False,
) -> None:
    attachment = run.attachment
    started = time.monotonic()
    run.progress(Stage.CHUNKING, 0, 1, force=True)
    # Units have no running heads: a sheet's header row repeated in each block is content.
    boilerplate = Boilerplate({}, set(), set()) if units else find_boilerplate(pages)
    chunks = chunk_pages(pages, boilerplate)
    if not chunks and too_large and settings.OCR_ENABLED:
        raise PdfError(_too_large_for_ocr(too_large))
    if not chunks:
        raise PdfError(
            "No text was found in this PDF, not even by OCR. It may contain only images "
            "without readable writing."
        )
    language = detect_language("\n".join(p.text for p in pages[:30]))
    config = search_config_for(language)
    with transaction.atomic():
        # Lock our row: a concurrent delete or reset waits, and we see whether we still own it.
        if not run._rows().select_for_update().exists():
            raise Superseded
        DocumentChunk.objects.filter(attachment=attachment).delete()
        DocumentPage.objects.filter(attachment=attachment).delete()
        DocumentPage.objects.bulk_create(page_rows(attachment, pages, boilerplate), batch_size=500)
        labels = {p.number: p.label for p in pages if p.label}
        DocumentChunk.objects.bulk_create(chunk_rows(attachment, chunks, labels), batch_size=500)
        index_text(attachment, language, config)
        run.update(
            searchable_at=Coalesce(F("searchable_at"), Now()),
            ocr_pages=ocr_count,
            language=language,
            search_config=config,
            stage=Stage.EMBEDDING,
            progress_current=0,
            progress_total=len(chunks),
        )
    run.timings["chunk"] = round(time.monotonic() - started, 3)
    run.timings.setdefault("searchable", round(time.monotonic() - run.started, 3))


def page_rows(
    attachment: NoteAttachment, pages: list[ExtractedPage], boilerplate: Boilerplate
) -> list[DocumentPage]:
    """Unsaved page rows: text, line styles (for re-chunking) and running heads and footers."""
    return [
        DocumentPage(
            attachment=attachment,
            number=p.number,
            text=p.text,
            is_ocr=p.is_ocr,
            lines=[[line.start, line.end, line.size, line.bold] for line in p.lines],
            running=[list(span) for span in boilerplate.running.get(p.number, [])],
            label=p.label,
            start_seconds=p.start_seconds,
        )
        for p in pages
    ]


def chunk_rows(
    attachment: NoteAttachment, chunks: list[Chunk], labels: dict[int, str] | None = None
) -> list[DocumentChunk]:
    """Unsaved chunk rows, indexed in document order (`labels`: a unit source's page number →
    its label)."""
    labels = labels or {}
    return [
        DocumentChunk(
            attachment=attachment,
            index=i,
            page_number=c.page_number,
            content=c.content,
            heading_path=c.heading_path,
            start_char=c.start,
            end_char=c.end,
            char_count=len(c.content),
            token_count=c.token_count,
            metadata=_chunk_metadata(c, labels),
        )
        for i, c in enumerate(chunks)
    ]


def _chunk_metadata(chunk: Chunk, labels: dict[int, str]) -> dict[str, object]:
    metadata: dict[str, object] = {"table": True} if chunk.is_table else {}
    if label := labels.get(chunk.page_number):
        metadata["unit"] = label  # how a citation of this chunk names where it is
    return metadata


def index_text(attachment: NoteAttachment, language: str, config: str) -> None:
    """Fill the chunks' tsvector (and its length, for BM25) now, so the document is
    keyword-searchable while it is being embedded. The vector holds three fields (BM25F,
    core.language.fields_tsvector_sql): the file's title, the passage's section headings and
    its text."""
    title = title_words(attachment.original_name)
    table = DocumentChunk._meta.db_table
    # The tsvector and its length in one UPDATE: each row (and the GIN index) is written once.
    length = word_count_sql("s.v")
    with connection.cursor() as cursor:
        if language in SEGMENTED:
            expr = fields_tsvector_sql(config, "%s", "%s", "%s")
            rows: list[list[str | int]] = [
                [*fields_params(config, segment_for_search(title, language),
                                segment_for_search(" ".join(map(str, path or [])), language),
                                segment_for_search(content, language)), pk]
                for pk, content, path in DocumentChunk.objects.filter(
                    attachment=attachment
                ).values_list("pk", "content", "heading_path")
            ]  # fmt: skip
            cursor.executemany(
                f"UPDATE {table} SET search_vector = s.v, token_len = {length} "  # noqa: S608
                f"FROM (SELECT {expr} AS v) s WHERE id = %s",
                rows,
            )
        else:
            expr = fields_tsvector_sql(config, "%s", _SECTION_SQL, "content")
            cursor.execute(
                f"UPDATE {table} c SET search_vector = s.v, token_len = {length} "  # noqa: S608
                f"FROM (SELECT id, {expr} AS v FROM {table} "
                "WHERE attachment_id = %s) s WHERE c.id = s.id",
                [*fields_params(config, title, None, None), attachment.pk],
            )
    index_statistics(attachment_ids=[attachment.pk])


# A chunk's section headings as one text (its heading_path, a JSON list).
_SECTION_SQL = (
    "coalesce((SELECT string_agg(h, ' ') FROM jsonb_array_elements_text(heading_path) AS h), '')"
)


def title_words(name: str) -> str:
    """A file's title as BM25 reads it: its name without the extension, separators as spaces
    ("R-data.pdf" → "R data")."""
    return " ".join(re.sub(r"[\W_]+", " ", Path(name).stem).split())


def index_statistics(*, attachment_ids: list[int]) -> None:
    """Rebuild what BM25 reads of these files from their chunks' tsvectors: chunk count and
    total length, and per lexeme its posting list (chunk ids, term frequencies, lengths)."""
    if not attachment_ids:
        return
    chunks = DocumentChunk._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {NoteAttachment._meta.db_table} a "  # noqa: S608 - tables are ours
            "SET chunk_count = s.n, token_total = s.total FROM ("
            "  SELECT x.id, count(c.id) AS n, coalesce(sum(c.token_len), 0) AS total"
            f"  FROM unnest(%s::bigint[]) AS x(id) LEFT JOIN {chunks} c ON c.attachment_id = x.id"
            "  GROUP BY x.id"
            ") s WHERE a.id = s.id",
            [attachment_ids],
        )
        cursor.execute(
            f"DELETE FROM {PostingList._meta.db_table} WHERE attachment_id = ANY(%s)",  # noqa: S608
            [attachment_ids],
        )
        cursor.execute(
            f"INSERT INTO {PostingList._meta.db_table} "  # noqa: S608
            "(attachment_id, lexeme, df, chunk_ids, tfs, lens) "
            "SELECT c.attachment_id, u.lexeme, count(*), array_agg(c.id ORDER BY c.id), "
            f"  array_agg({term_count_sql('u')} ORDER BY c.id), "
            "  array_agg(c.token_len ORDER BY c.id) "
            f"FROM {chunks} c, unnest(c.search_vector) AS u "
            "WHERE c.attachment_id = ANY(%s) GROUP BY c.attachment_id, u.lexeme",
            [attachment_ids],
        )


def passage_windows(embedder: Embedder, content: str, heading_path: list[str]) -> list[str]:
    """What the embedder sees of a passage: its text in windows that fit the model, each
    led by the heading path that gives the passage its context."""
    return embedder.windows(content, prefix=" › ".join(heading_path))


def _embed_in_slices(
    run: _Run, embedder: Embedder, texts: list[str], done: int, passages: int, total: int
) -> list[list[float]]:
    """Vectors for one batch's windows, embedded a slice at a time so that the page's progress
    moves every second or so (a batch of 128 passages takes several seconds on two cores).
    The slices are cut from the windows ordered by length, as the embedder orders a batch
    itself, so slicing adds no padding: throughput stays that of one call. Each slice is
    sized by the pace of the one before (`run.embed_slice`, carried from batch to batch) to
    take about EMBED_SLICE_SECONDS, growing at most twofold since later windows are longer:
    a fixed 64 windows took 1 s on two idle cores but 4-9 s with two workers and other work
    on them, and the page then showed no movement for as long."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vectors: list[list[float]] = [[] for _ in texts]
    start = 0
    while start < len(order):
        part = order[start : start + run.embed_slice]
        began = time.monotonic()
        for i, vector in zip(part, embedder.embed([texts[i] for i in part]), strict=True):
            vectors[i] = vector
        took = time.monotonic() - began
        start += len(part)
        run.progress(Stage.EMBEDDING, done + passages * start // len(order), total)
        fits = int(len(part) * EMBED_SLICE_SECONDS / took) if took > 0 else EMBED_SLICE
        run.embed_slice = min(EMBED_SLICE, 2 * run.embed_slice, max(EMBED_SLICE_MIN, fits))
    return vectors


def _embed(run: _Run) -> None:
    attachment = run.attachment
    started = time.monotonic()
    model = embedding_model_name()
    todo = list(
        DocumentChunk.objects.filter(attachment=attachment)
        .exclude(embedding_model=model)
        .order_by("index")
        .only("pk", "content", "heading_path")
    )
    total = DocumentChunk.objects.filter(attachment=attachment).count()
    done = total - len(todo)
    run.progress(Stage.EMBEDDING, done, total, force=True)
    embedder = get_embedder()
    batch_size = settings.EMBEDDING_BATCH_SIZE * 4
    for i in range(0, len(todo), batch_size):
        batch = todo[i : i + batch_size]
        windows = [passage_windows(embedder, c.content, c.heading_path) for c in batch]
        flat = [w for ws in windows for w in ws]
        vectors = iter(_embed_in_slices(run, embedder, flat, done, len(batch), total))
        rows = [
            ChunkVector(chunk=chunk, attachment=attachment, window=n, embedding=next(vectors))
            for chunk, ws in zip(batch, windows, strict=True)
            for n in range(len(ws))
        ]
        for chunk in batch:
            chunk.embedding_model = embedder.model_name
        with transaction.atomic():
            if not run._rows().select_for_update().exists():
                raise Superseded
            ChunkVector.objects.filter(chunk__in=batch).delete()
            ChunkVector.objects.bulk_create(rows)
            DocumentChunk.objects.bulk_update(batch, ["embedding_model"])
        done += len(batch)
        run.progress(Stage.EMBEDDING, done, total)
    run.timings["embed"] = round(time.monotonic() - started, 3)


def attachment_reembed(*, attachment_id: int) -> None:
    """Embed a ready attachment's chunks that lack a vector from the configured model (after
    a model change). Claims READY → PROCESSING; keyword search keeps working meanwhile."""
    claimed = NoteAttachment.objects.filter(pk=attachment_id, status=Status.READY).update(
        status=Status.PROCESSING,
        stage=Stage.EMBEDDING,
        attempts=F("attempts") + 1,
        heartbeat_at=timezone.now(),
    )
    if not claimed:
        return
    run = _Run(NoteAttachment.objects.get(pk=attachment_id))
    try:
        _embed(run)
        run.end(status=Status.READY, stage=Stage.DONE, embedding_model=embedding_model_name())
    except Superseded:
        pass
    except EmbeddingError as exc:
        run.end(status=Status.FAILED, error=f"Re-embedding failed: {exc} Reprocess to retry.")
