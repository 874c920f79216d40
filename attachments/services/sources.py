"""Adding a source, whatever its kind: the upload allowlist decides, before anything is stored,
whether a file is a PDF or an image (stored and ingested: files.py) or text (a new note holding it).

Callers pass objects fetched through the selectors (already authorized for the user).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models.expressions import RawSQL
from django.utils.translation import gettext

from attachments.models import NoteAttachment
from attachments.services.files import (
    attachment_add_as_note,
    attachment_upload,
    title_from_filename,
)
from attachments.validation import (
    TEXT_STRIP,
    SourceKind,
    clean_filename,
    upload_kind,
    validate_text_upload,
)
from notes.models import Note, Notebook
from notes.services import note_create

if TYPE_CHECKING:
    from core.types import User

# A stored note's body hashed as validation.normalise_text + text_sha256 hash an upload:
# line ends as \n, NFC, blank space trimmed at both ends, SHA-256 of the UTF-8 bytes.
_BODY_SHA256 = (
    "encode(sha256(convert_to(btrim(normalize(replace(replace("
    "notes_note.body, E'\\r\\n', E'\\n'), E'\\r', E'\\n'), NFC), %s), 'UTF8')), 'hex')"
)


class DuplicateText(ValidationError):
    """The same text (SHA-256 of the normalised text) is already a live note of the notebook."""

    def __init__(self, existing: Note, *, name: str) -> None:
        super().__init__(
            gettext("The text of “%(name)s” is already in the note “%(title)s”.")
            % {"name": name, "title": existing.title},
            code="duplicate",
        )
        self.existing_note = existing


@dataclass(frozen=True)
class AddedSource:
    """What one uploaded file became: an attachment (a PDF) or a new note (a text file)."""

    name: str
    attachment: NoteAttachment | None = None
    note: Note | None = None


def note_holding_text(*, notebook: Notebook, sha256: str) -> Note | None:
    """The live note of `notebook` whose body is this text (compared normalised, by hash)."""
    return (
        Note.objects.filter(notebook=notebook, trashed_at__isnull=True)
        .annotate(body_sha256=RawSQL(_BODY_SHA256, (TEXT_STRIP,)))  # noqa: S611 - constant SQL
        .filter(body_sha256=sha256)
        .order_by("created_at")
        .first()
    )


def text_source_add(*, user: User, notebook: Notebook, uploaded: UploadedFile[bytes]) -> Note:
    """A Markdown or text file becomes a new note of `notebook`, titled after the file, its body
    the decoded, normalised text (searchable like any note). Refused (nothing stored) when it
    is not readable text or when a live note of the notebook already holds the same text:
    DuplicateText names it. The check and the insert run under the notebook's row lock, so two
    uploads of one text at once make one note."""
    info = validate_text_upload(uploaded=uploaded)
    with transaction.atomic():
        list(Notebook.objects.select_for_update(no_key=True).filter(pk=notebook.pk).values("pk"))
        existing = note_holding_text(notebook=notebook, sha256=info.sha256)
        if existing is not None:
            raise DuplicateText(existing, name=info.name)
        title = title_from_filename(info.name)[: settings.NOTE_TITLE_MAX]
        return note_create(notebook=notebook, author=user, title=title, body=info.text)


def source_add(
    *,
    user: User,
    notebook: Notebook,
    uploaded: UploadedFile[bytes],
    note: Note | None = None,
) -> AddedSource:
    """Add one uploaded file to `notebook`, by kind (validation.UPLOAD_TYPES; any other
    extension is refused before anything is stored). A PDF or an image (checked by content)
    is attached to `note`, or without one to a new note titled after it; a text file always
    becomes a new note of the notebook (also when `note` is given: the note's own text is
    the user's and is left alone)."""
    kind = upload_kind(uploaded.name)
    if note is not None and note.is_trashed:
        raise ValidationError(
            gettext("Restore the note from the trash before adding files."), code="trashed"
        )
    if kind is SourceKind.TEXT:
        added = text_source_add(user=user, notebook=notebook, uploaded=uploaded)
        return AddedSource(name=clean_filename(uploaded.name), note=added)
    if note is None:
        attachment = attachment_add_as_note(
            user=user, notebook=notebook, uploaded=uploaded, kind=kind
        )
    else:
        attachment = attachment_upload(user=user, note=note, uploaded=uploaded, kind=kind)
    return AddedSource(name=attachment.original_name, attachment=attachment)
