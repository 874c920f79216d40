"""Adding a source, whatever its kind: the upload allowlist decides, before anything is stored,
whether a file is a PDF or an image (stored and ingested: files.py) or text (a new note holding it).

Callers pass objects fetched through the selectors (already authorized for the user).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.translation import gettext

from attachments.formats.youtube import video_id
from attachments.models import NoteAttachment
from attachments.services.files import (
    DuplicateAttachment,
    attachment_add_as_note,
    attachment_upload,
    enqueue_ingest,
    title_from_filename,
)
from attachments.services.links import links_available
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
        return note_create(
            notebook=notebook, author=user, title=title, body=info.text, from_file=info.name
        )


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


# --- links: a web page, or a YouTube video's transcript ----------------------------------------

LINK_MAX_CHARS = 2000


def _clean_link(raw: str) -> str:
    url = (raw or "").strip()
    if not url:
        raise ValidationError(gettext("Paste the address of a web page."), code="required")
    if len(url) > LINK_MAX_CHARS:
        raise ValidationError(
            gettext("That address is too long (at most %(limit)s characters).")
            % {"limit": LINK_MAX_CHARS},
            code="max_length",
        )
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValidationError(
            gettext("Only web addresses starting with http:// or https:// can be added."),
            code="invalid",
        )
    if parts.username or parts.password:
        raise ValidationError(
            gettext("An address with a user name or password in it cannot be added."),
            code="invalid",
        )
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise ValidationError(gettext("That is not a web address."), code="invalid")
    return url


def link_name(url: str) -> str:
    """What a link is called until its page's title is known: host and path, shortened."""
    parts = urlsplit(url)
    name = (parts.hostname or "") + (parts.path if parts.path not in ("", "/") else "")
    return clean_filename(name[:180]) if name else "web page"


def source_add_link(
    *, user: User, notebook: Notebook, url: str, note: Note | None = None
) -> NoteAttachment:
    """Add a web page (or, for a YouTube address, the video's transcript) by its address: a
    source on `note`, or without one on a new note titled after it; the worker fetches it
    (core.fetch: public addresses only, size and time capped) and reads it like a file. The
    same address already in the notebook raises DuplicateAttachment naming it."""
    if not links_available():
        raise ValidationError(
            gettext("Web pages cannot be added on this server yet."), code="unavailable"
        )
    url = _clean_link(url)
    if note is not None and note.is_trashed:
        raise ValidationError(
            gettext("Restore the note from the trash before adding sources."), code="trashed"
        )
    video = video_id(url)
    kind, fmt = ("transcript", "youtube") if video else ("web", "html")
    digest = hashlib.sha256(f"link:{url}".encode()).hexdigest()
    existing = (
        NoteAttachment.objects.filter(
            note__notebook=notebook, note__trashed_at__isnull=True, sha256=digest
        )
        .select_related("note")
        .first()
    )
    if existing:
        raise DuplicateAttachment(existing, in_notebook=True)
    name = f"YouTube {video}" if video else link_name(url)
    with transaction.atomic():
        if note is None:
            note = note_create(
                notebook=notebook, author=user, title=name[: settings.NOTE_TITLE_MAX]
            )
        attachment = NoteAttachment(
            note=note, uploaded_by=user, original_name=name, kind=kind, format=fmt,
            source_url=url, size=0, sha256=digest, status=NoteAttachment.Status.PENDING,
            heartbeat_at=timezone.now(),
        )  # fmt: skip
        # An empty file until the worker has fetched the link (it then holds what was fetched).
        attachment.file.save(
            f"{attachment.uuid}{'.vtt' if video else '.html'}", ContentFile(b""), save=False
        )
        attachment.save()
        enqueue_ingest(attachment.pk)
    return attachment
