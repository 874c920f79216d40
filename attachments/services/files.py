"""Writes for attachments: upload, password, reprocess, delete.

Callers pass objects fetched through attachments.selectors (already authorized for the user).
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext, ngettext

from attachments import signals
from attachments.models import MAX_PASSWORD_ATTEMPTS, NoteAttachment
from attachments.thumbnails import thumbnail_path
from attachments.validation import (
    SourceKind,
    ValidatedUpload,
    check_quota,
    validate_format_upload,
    validate_image_upload,
    validate_pdf_upload,
)
from core.jobs import job_submit
from core.quota import lock_storage_of
from notes.models import Note, Notebook
from notes.services import note_create

if TYPE_CHECKING:
    from core.types import User

logger = logging.getLogger(__name__)
Status = NoteAttachment.Status
Stage = NoteAttachment.Stage


class DuplicateAttachment(ValidationError):
    """The same file (SHA-256) is already attached to this note."""

    def __init__(self, existing: NoteAttachment, *, in_notebook: bool = False) -> None:
        if in_notebook:
            message = gettext("“%(name)s” is already attached to the note “%(title)s”.") % {
                "name": existing.original_name,
                "title": existing.note.title,
            }
        else:
            message = gettext("“%(name)s” is already attached to this note.") % {
                "name": existing.original_name
            }
        super().__init__(message, code="duplicate")
        self.existing = existing


def enqueue_ingest(attachment_id: int, *, not_before: datetime | None = None) -> None:
    """Queue one ingestion run (now, or at `not_before`) as the uploader's job (core.jobs:
    fair per user), sent when the current transaction commits. A run that fails has already
    marked its file failed, so the job is never run again by the queue (one attempt); reruns
    are the reaper's and the backoff's decision."""
    job_submit(
        "attachments.tasks.ingest_attachment",
        attachment_id,
        user_id=_uploader(attachment_id),
        group="ingest",
        not_before=not_before,
    )


def enqueue_reembed(attachment_id: int, *, group: str = "reembed") -> None:
    """Queue embedding a ready file's chunks again (an operator's command) as the uploader's
    job, so a re-embedding of the whole library takes turns with users' own work."""
    job_submit(
        "attachments.tasks.reembed_attachment",
        attachment_id,
        user_id=_uploader(attachment_id),
        group=group,
    )


def _uploader(attachment_id: int) -> int | None:
    """Whose turn an ingestion takes (core.jobs): the uploader's."""
    return (
        NoteAttachment.objects.filter(pk=attachment_id)
        .values_list("uploaded_by_id", flat=True)
        .first()
    )


def _enqueue_on_commit(attachment_id: int) -> None:
    """Queue the run in the current transaction; its ticket goes out when that commits."""
    enqueue_ingest(attachment_id)


def unlocked_path(attachment: NoteAttachment) -> Path:
    """Where the decrypted working copy of a password-protected PDF lives during one run."""
    return Path(attachment.file.path).with_suffix(".unlocked.pdf")


def _remove_files(attachment: NoteAttachment) -> None:
    for path in (Path(attachment.file.path), unlocked_path(attachment), thumbnail_path(attachment)):
        path.unlink(missing_ok=True)


def remove_files_when_deleted(sender: Any, instance: NoteAttachment, **kwargs: Any) -> None:
    """post_delete of NoteAttachment, however it is deleted (its own delete, its note's or
    notebook's, the admin): its files go once the deletion commits, never before (a rollback
    keeps the row and so must keep them)."""
    transaction.on_commit(lambda: _remove_files(instance), using=kwargs.get("using"))


def _validate(*, user: User, uploaded: UploadedFile[bytes], kind: SourceKind) -> ValidatedUpload:
    if kind is SourceKind.IMAGE:
        return validate_image_upload(user=user, uploaded=uploaded)
    if kind is SourceKind.FORMAT:
        return validate_format_upload(user=user, uploaded=uploaded)
    return validate_pdf_upload(user=user, uploaded=uploaded)


def _lock_uploads_of(user: User) -> None:
    """Serialise this user's stores (uploads, notes) until the end of the current transaction:
    core.quota.lock_storage_of."""
    lock_storage_of(user_id=user.pk)


def attachment_upload(
    *, user: User, note: Note, uploaded: UploadedFile[bytes], kind: SourceKind = SourceKind.PDF
) -> NoteAttachment:
    """Validate and store one PDF (or image: `kind`) on `note`, then queue its ingestion once
    committed.

    Raises ValidationError (nothing stored) for bad files and DuplicateAttachment when the
    same content is already on the note. The quota is checked again, authoritatively, under a
    per-user lock in the transaction that inserts the row, so concurrent uploads of one user
    cannot together exceed it.
    """
    if note.is_trashed:
        raise ValidationError(
            gettext("Restore the note from the trash before adding files."), code="trashed"
        )
    info = _validate(user=user, uploaded=uploaded, kind=kind)
    existing = NoteAttachment.objects.filter(note=note, sha256=info.sha256).first()
    if existing:
        raise DuplicateAttachment(existing)
    return _store(user=user, note=note, uploaded=uploaded, info=info)


def attachment_add_as_note(
    *,
    user: User,
    notebook: Notebook,
    uploaded: UploadedFile[bytes],
    kind: SourceKind = SourceKind.PDF,
) -> NoteAttachment:
    """A file dropped on the notebook's sources: a new note titled after the file, with the
    PDF attached. Both or neither: a refused file leaves no empty note behind.

    The same content already in one of the notebook's notes raises DuplicateAttachment naming
    it, so a second drop of a file does not make a second note about it.
    """
    info = _validate(user=user, uploaded=uploaded, kind=kind)
    existing = (
        NoteAttachment.objects.filter(
            note__notebook=notebook, note__trashed_at__isnull=True, sha256=info.sha256
        )
        .select_related("note")
        .first()
    )
    if existing:
        raise DuplicateAttachment(existing, in_notebook=True)
    with transaction.atomic():
        note = note_create(notebook=notebook, author=user, title=title_from_filename(info.name))
        return _store(user=user, note=note, uploaded=uploaded, info=info)


def title_from_filename(name: str) -> str:
    """ "Annual_report-2024.pdf" → "Annual report 2024": the note title a dropped file gets."""
    stem = Path(name).stem if "." in name else name
    words = " ".join(stem.replace("_", " ").replace("-", " ").split())
    return words or name


def _store(
    *, user: User, note: Note, uploaded: UploadedFile[bytes], info: ValidatedUpload
) -> NoteAttachment:
    attachment = NoteAttachment(
        note=note,
        uploaded_by=user,
        original_name=info.name,
        kind=info.kind,
        format=info.format,
        size=info.size,
        sha256=info.sha256,
        page_count=info.page_count,
        status=Status.NEEDS_PASSWORD if info.encrypted else Status.PENDING,
        heartbeat_at=timezone.now(),
        error="This PDF is password-protected. Enter its password to read it."
        if info.encrypted
        else "",
    )
    attachment.file.save(f"{attachment.uuid}{info.extension}", uploaded, save=False)
    try:
        with transaction.atomic():
            _lock_uploads_of(user)
            check_quota(user=user, name=info.name, size=info.size)
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
        raise ValidationError(gettext("This file is already being processed."), code="active")
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
        _guides_after_reprocess(attachment)
    attachment.refresh_from_db()
    return attachment


def _guides_after_reprocess(attachment: NoteAttachment) -> None:
    signals.source_reprocessed.send(sender=NoteAttachment, attachment=attachment)


def _guides_after_delete(notebook_id: int) -> None:
    signals.source_deleted.send(sender=NoteAttachment, notebook_id=notebook_id)


def attachment_delete(*, attachment: NoteAttachment) -> None:
    """Delete the attachment, its pages, chunks and files. A run in progress notices and stops."""
    notebook_id = attachment.note.notebook_id
    with transaction.atomic():
        attachment.delete()  # its files go on commit (remove_files_when_deleted)
        transaction.on_commit(lambda: _guides_after_delete(notebook_id))


def attachment_submit_password(*, attachment: NoteAttachment, password: str) -> NoteAttachment:
    """Try `password`; if right, write a decrypted working copy and queue ingestion.

    The password is used here only and never stored; the working copy is deleted when the
    run ends. A wrong password counts; after MAX_PASSWORD_ATTEMPTS the file stays locked
    until the user asks to try again.
    """
    # pikepdf (qpdf) only when a locked PDF is opened, not at web start-up
    import pikepdf

    if attachment.status != Status.NEEDS_PASSWORD:
        raise ValidationError(gettext("This file is not waiting for a password."), code="state")
    if attachment.is_locked:
        raise ValidationError(
            gettext("Locked after %(count)d wrong passwords. Choose “Try again” first.")
            % {"count": MAX_PASSWORD_ATTEMPTS},
            code="locked",
        )
    if not password or len(password) > 1024:
        raise ValidationError(gettext("Type the PDF's password."), code="required")
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
            ngettext(
                "Wrong password. %(count)d attempt left.",
                "Wrong password. %(count)d attempts left.",
                left,
            )
            % {"count": left}
            if left > 0
            else gettext("Wrong password. The file is now locked."),
            code="wrong_password",
        ) from None
    except pikepdf.PdfError as exc:
        raise ValidationError(
            gettext("The PDF cannot be opened: %(reason)s") % {"reason": exc}, code="damaged"
        ) from None
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
