"""Writes for attachments: upload, password, reprocess, delete, and the ingestion pipeline.

Callers pass objects fetched through attachments.selectors (already authorized for the user).
"""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from attachments.chunking import chunk_pages
from attachments.language import (
    SEGMENTED,
    detect_language,
    search_config_for,
    segment_for_search,
)
from attachments.models import DocumentChunk, DocumentPage, NoteAttachment
from attachments.pdf.extract import (
    ExtractedPage,
    PasswordRequired,
    PdfError,
    extract_text,
    ocr_pages,
)
from attachments.validation import validate_pdf_upload
from notebook.embeddings import EmbeddingError, embedding_model_name, get_embedder
from notes.models import Note

if TYPE_CHECKING:
    from notebook.types import User

logger = logging.getLogger(__name__)
Status = NoteAttachment.Status
Stage = NoteAttachment.Stage
MAX_PASSWORD_ATTEMPTS = 3
PROGRESS_INTERVAL = 0.5  # seconds between progress writes
RETRY_BACKOFF = (30, 120, 600)  # seconds before retrying after a transient failure


class DuplicateAttachment(ValidationError):
    """The same file (SHA-256) is already attached to this note."""

    def __init__(self, existing: NoteAttachment) -> None:
        super().__init__(
            f"“{existing.original_name}” is already attached to this note.", code="duplicate"
        )
        self.existing = existing


def _enqueue(attachment_id: int) -> None:
    from django_q.tasks import async_task

    async_task(
        "attachments.tasks.ingest_attachment",
        attachment_id,
        task_name=f"ingest-{attachment_id}-{int(time.time())}",
        group="ingest",
    )


def _enqueue_on_commit(attachment_id: int) -> None:
    transaction.on_commit(lambda: _enqueue(attachment_id))


def unlocked_path(attachment: NoteAttachment) -> Path:
    """Where the decrypted working copy of a password-protected PDF lives during one run."""
    return Path(attachment.file.path).with_suffix(".unlocked.pdf")


def _remove_files(attachment: NoteAttachment) -> None:
    for path in (Path(attachment.file.path), unlocked_path(attachment)):
        path.unlink(missing_ok=True)


def attachment_upload(*, user: User, note: Note, uploaded: UploadedFile[bytes]) -> NoteAttachment:
    """Validate and store one PDF on `note`, then queue its ingestion once committed.

    Raises ValidationError (nothing stored) for bad files and DuplicateAttachment when the
    same content is already on the note.
    """
    if note.is_trashed:
        raise ValidationError(
            "Restore the note from the trash before adding files.", code="trashed"
        )
    info = validate_pdf_upload(user=user, uploaded=uploaded)
    existing = NoteAttachment.objects.filter(note=note, sha256=info.sha256).first()
    if existing:
        raise DuplicateAttachment(existing)
    attachment = NoteAttachment(
        note=note,
        uploaded_by=user,
        original_name=info.name,
        size=info.size,
        sha256=info.sha256,
        page_count=info.page_count,
        status=Status.NEEDS_PASSWORD if info.encrypted else Status.PENDING,
        heartbeat_at=timezone.now(),
        error="This PDF is password-protected. Enter its password to read it."
        if info.encrypted
        else "",
    )
    attachment.file.save(f"{attachment.uuid}.pdf", uploaded, save=False)
    try:
        with transaction.atomic():
            attachment.save()
            if attachment.status == Status.PENDING:
                _enqueue_on_commit(attachment.pk)
    except IntegrityError:
        # Someone uploaded the same file to this note between our check and our insert.
        Path(attachment.file.path).unlink(missing_ok=True)
        raise DuplicateAttachment(
            NoteAttachment.objects.get(note=note, sha256=info.sha256)
        ) from None
    except BaseException:
        Path(attachment.file.path).unlink(missing_ok=True)
        raise
    return attachment


def attachment_reprocess(*, attachment: NoteAttachment) -> NoteAttachment:
    """Queue the attachment for a fresh run (replaces its pages and chunks when it finishes)."""
    if attachment.is_active:
        raise ValidationError("This file is already being processed.", code="active")
    with transaction.atomic():
        NoteAttachment.objects.filter(pk=attachment.pk).update(
            status=Status.PENDING,
            stage=Stage.QUEUED,
            progress_current=0,
            progress_total=0,
            error="",
            password_attempts=0,
            attempts=0,
            heartbeat_at=timezone.now(),
        )
        _enqueue_on_commit(attachment.pk)
    attachment.refresh_from_db()
    return attachment


def attachment_delete(*, attachment: NoteAttachment) -> None:
    """Delete the attachment, its pages, chunks and files. A run in progress notices and stops."""
    with transaction.atomic():
        attachment.delete()
        transaction.on_commit(lambda: _remove_files(attachment))


def attachment_submit_password(*, attachment: NoteAttachment, password: str) -> NoteAttachment:
    """Try `password`; if right, write a decrypted working copy and queue ingestion.

    The password is used here only and never stored; the working copy is deleted when the
    run ends. A wrong password counts; after MAX_PASSWORD_ATTEMPTS the file stays locked
    until the user asks to try again.
    """
    import pikepdf

    if attachment.status != Status.NEEDS_PASSWORD:
        raise ValidationError("This file is not waiting for a password.", code="state")
    if attachment.is_locked:
        raise ValidationError(
            f"Locked after {MAX_PASSWORD_ATTEMPTS} wrong passwords. Choose “Try again” first.",
            code="locked",
        )
    if not password or len(password) > 1024:
        raise ValidationError("Type the PDF's password.", code="required")
    try:
        with pikepdf.open(attachment.file.path, password=password) as pdf:
            pages = len(pdf.pages)
            pdf.save(unlocked_path(attachment))
    except pikepdf.PasswordError:
        NoteAttachment.objects.filter(pk=attachment.pk).update(
            password_attempts=F("password_attempts") + 1
        )
        attachment.refresh_from_db()
        left = MAX_PASSWORD_ATTEMPTS - attachment.password_attempts
        raise ValidationError(
            "Wrong password. "
            + (
                f"{left} attempt{'s' if left != 1 else ''} left."
                if left > 0
                else "The file is now locked."
            ),
            code="wrong_password",
        ) from None
    except pikepdf.PdfError as exc:
        raise ValidationError(f"The PDF cannot be opened: {exc}", code="damaged") from None
    with transaction.atomic():
        NoteAttachment.objects.filter(pk=attachment.pk).update(
            status=Status.PENDING,
            stage=Stage.QUEUED,
            error="",
            password_attempts=0,
            page_count=pages,
            attempts=0,
            heartbeat_at=timezone.now(),
        )
        _enqueue_on_commit(attachment.pk)
    attachment.refresh_from_db()
    return attachment


def attachment_unlock_reset(*, attachment: NoteAttachment) -> NoteAttachment:
    """After too many wrong passwords, let the user try again."""
    if attachment.status == Status.NEEDS_PASSWORD:
        NoteAttachment.objects.filter(pk=attachment.pk).update(password_attempts=0)
        attachment.refresh_from_db()
    return attachment


# --- The ingestion pipeline -----------------------------------------------------------------


class Superseded(Exception):
    """The row was deleted, reset or claimed by a newer run; this run must stop writing."""


class _Run:
    """One ingestion run of one attachment, fenced by the `attempts` value it claimed."""

    def __init__(self, attachment: NoteAttachment) -> None:
        self.attachment = attachment
        self.token = attachment.attempts
        self.timings: dict[str, float] = {}
        self._last_write = 0.0

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


def attachment_ingest(*, attachment_id: int) -> None:
    """Claim a pending attachment (conditional UPDATE) and run extract → OCR → chunk → embed.

    Idempotent: pages and chunks are replaced in one transaction, so a re-run leaves exactly one
    set. Permanent problems end `failed` with a reason; transient ones (embedding API busy) are
    retried later with backoff, at most INGEST_MAX_ATTEMPTS runs in all.
    """
    claimed = NoteAttachment.objects.filter(pk=attachment_id, status=Status.PENDING).update(
        status=Status.PROCESSING,
        stage=Stage.EXTRACTING,
        progress_current=0,
        progress_total=0,
        error="",
        attempts=F("attempts") + 1,
        heartbeat_at=timezone.now(),
    )
    if not claimed:
        logger.info("attachment %s is not pending (gone or taken); nothing to do", attachment_id)
        return
    attachment = NoteAttachment.objects.get(pk=attachment_id)
    run = _Run(attachment)
    keep_unlocked = False
    try:
        _extract_and_index(run)
        _embed(run)
        run.end(
            status=Status.READY,
            stage=Stage.DONE,
            progress_current=F("progress_total"),
            ready_at=timezone.now(),
            embedding_model=embedding_model_name(),
        )
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


def _retry_later(run: _Run, reason: str) -> None:
    from django_q.models import Schedule

    delay = RETRY_BACKOFF[min(run.token, len(RETRY_BACKOFF)) - 1]
    run.end(
        status=Status.PENDING,
        error=f"Will retry in {delay} s: {reason}"[:1000],
    )
    Schedule.objects.create(
        name=f"retry ingest {run.attachment.pk} #{run.token}",
        func="attachments.tasks.ingest_attachment",
        args=str(run.attachment.pk),
        schedule_type=Schedule.ONCE,
        repeats=1,
        next_run=timezone.now() + timedelta(seconds=delay),
    )


def _source(attachment: NoteAttachment) -> Path:
    unlocked = unlocked_path(attachment)
    return unlocked if unlocked.exists() else Path(attachment.file.path)


def _needs_ocr(page: ExtractedPage) -> bool:
    """Little text and an image on the page: probably a scan. (Blank pages have no image;
    a CJK character carries about as much as a short word, so it counts three.)"""
    text = page.text.strip()
    weight = len(text) + 2 * sum(1 for ch in text if "\u3000" <= ch <= "\u9fff")
    return page.has_image and weight < settings.OCR_MIN_CHARS


def _extract_and_index(run: _Run) -> None:
    attachment = run.attachment
    source = _source(attachment)

    started = time.monotonic()
    extraction = extract_text(
        source,
        expected_pages=attachment.page_count,
        on_progress=lambda done, n: run.progress(Stage.EXTRACTING, done, n),
    )
    pages = extraction.pages
    if not pages:
        raise PdfError("The PDF has no pages.")
    run.update(page_count=extraction.page_count)
    run.timings["extract"] = round(time.monotonic() - started, 3)

    started = time.monotonic()
    sparse = [p.number for p in pages if _needs_ocr(p)]
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

    started = time.monotonic()
    run.progress(Stage.CHUNKING, 0, 1, force=True)
    chunks = chunk_pages(pages)
    if not chunks:
        raise PdfError(
            "No text was found in this PDF, not even by OCR. It may contain only images "
            "without readable writing."
        )
    language = detect_language("\n".join(p.text for p in pages[:30]))
    config = search_config_for(language)
    model = embedding_model_name()
    with transaction.atomic():
        # Lock our row: a concurrent delete or reset waits, and we see whether we still own it.
        if not run._rows().select_for_update().exists():
            raise Superseded
        DocumentChunk.objects.filter(attachment=attachment).delete()
        DocumentPage.objects.filter(attachment=attachment).delete()
        DocumentPage.objects.bulk_create(
            [
                DocumentPage(attachment=attachment, number=p.number, text=p.text, is_ocr=p.is_ocr)
                for p in pages
            ],
            batch_size=500,
        )
        DocumentChunk.objects.bulk_create(
            [
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
                    metadata={"table": True} if c.is_table else {},
                    embedding_model=model,
                )
                for i, c in enumerate(chunks)
            ],
            batch_size=500,
        )
        _index_text(attachment, language, config)
        run.update(
            ocr_pages=ocr_count,
            language=language,
            search_config=config,
            stage=Stage.EMBEDDING,
            progress_current=0,
            progress_total=len(chunks),
        )
    run.timings["chunk"] = round(time.monotonic() - started, 3)


def _index_text(attachment: NoteAttachment, language: str, config: str) -> None:
    """Fill the chunks' tsvector now, so the document is keyword-searchable during embedding."""
    # `simple` keeps accents as typed; unaccent makes "café" match "cafe". Stemming configs
    # (english, german, …) know their accents and are left alone.
    expr = (
        "to_tsvector(%s::regconfig, unaccent({}))"
        if config == "simple"
        else "to_tsvector(%s::regconfig, {})"
    )
    table = DocumentChunk._meta.db_table
    with connection.cursor() as cursor:
        if language in SEGMENTED:
            rows = [
                (config, segment_for_search(content, language), pk)
                for pk, content in DocumentChunk.objects.filter(attachment=attachment).values_list(
                    "pk", "content"
                )
            ]
            cursor.executemany(
                f"UPDATE {table} SET search_vector = {expr.format('%s')} WHERE id = %s",  # noqa: S608
                rows,
            )
        else:
            cursor.execute(
                f"UPDATE {table} SET search_vector = {expr.format('content')} "  # noqa: S608
                "WHERE attachment_id = %s",
                [config, attachment.pk],
            )


def embedding_text(content: str, heading_path: list[str]) -> str:
    """What the embedder sees: the headings give a passage its context."""
    return (" › ".join(heading_path) + "\n" + content) if heading_path else content


def _embed(run: _Run) -> None:
    attachment = run.attachment
    started = time.monotonic()
    model = embedding_model_name()
    todo = list(
        DocumentChunk.objects.filter(attachment=attachment)
        .filter(Q(embedding__isnull=True) | ~Q(embedding_model=model))
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
        vectors = embedder.embed([embedding_text(c.content, c.heading_path) for c in batch])
        for chunk, vector in zip(batch, vectors, strict=True):
            chunk.embedding = vector
            chunk.embedding_model = embedder.model_name
        with transaction.atomic():
            if not run._rows().select_for_update().exists():
                raise Superseded
            DocumentChunk.objects.bulk_update(batch, ["embedding", "embedding_model"])
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


def attachment_reap_stuck() -> int:
    """Requeue (or, after too many runs, fail) attachments whose run stopped reporting, and
    requeue pending ones whose task was lost. Returns how many rows it touched."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.INGEST_STALE_SECONDS)
    touched = 0
    for att in NoteAttachment.objects.filter(status=Status.PROCESSING, heartbeat_at__lt=cutoff):
        rows = NoteAttachment.objects.filter(
            pk=att.pk, status=Status.PROCESSING, attempts=att.attempts
        )
        if att.attempts >= settings.INGEST_MAX_ATTEMPTS:
            touched += rows.update(
                status=Status.FAILED,
                error=f"Processing stopped {att.attempts} times without finishing (the worker "
                "crashed or ran out of time). Reprocess to try again.",
            )
            unlocked_path(att).unlink(missing_ok=True)
        elif rows.update(
            status=Status.PENDING,
            stage=Stage.QUEUED,
            heartbeat_at=now,
            error="Restarted: the previous run stopped responding.",
        ):
            touched += 1
            _enqueue(att.pk)
    lost = NoteAttachment.objects.filter(status=Status.PENDING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff)
    )
    for att in lost:
        if NoteAttachment.objects.filter(pk=att.pk, status=Status.PENDING).update(heartbeat_at=now):
            touched += 1
            _enqueue(att.pk)
    if touched:
        logger.warning("reaper touched %s stuck attachment(s)", touched)
    return touched
