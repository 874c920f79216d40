"""Reads of attachments and their pages, scoped through the notes the user may see."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import QuerySet, Sum
from django.shortcuts import get_object_or_404

from attachments.models import DocumentPage, NoteAttachment
from notes.models import Role
from notes.selectors import note_get, notebook_check, notebook_get, visible_notes

if TYPE_CHECKING:
    from core.types import User


def _visible_attachments(*, user: User) -> QuerySet[NoteAttachment]:
    return NoteAttachment.objects.filter(note__in=visible_notes(user=user))


def attachment_list(*, user: User, note_id: int) -> QuerySet[NoteAttachment]:
    """Attachments of one note the user may see (Http404 for anyone else's note)."""
    note = note_get(user=user, note_id=note_id)
    return NoteAttachment.objects.filter(note=note).select_related("note").order_by("created_at")


def notebook_sources(*, user: User, notebook_id: int) -> QuerySet[NoteAttachment]:
    """The PDFs of one visible notebook's live notes, grouped by note (most recently edited
    note first), oldest file first within a note; Http404 for anyone else's notebook."""
    notebook = notebook_get(user=user, notebook_id=notebook_id)
    return (
        NoteAttachment.objects.filter(note__notebook=notebook, note__trashed_at__isnull=True)
        .select_related("note", "profile")
        .order_by("-note__updated_at", "note_id", "created_at")
    )


def attachment_get(*, user: User, attachment_id: int, role: Role = Role.VIEWER) -> NoteAttachment:
    """One attachment on a note the user may see; Http404 otherwise, PermissionDenied if the
    user's role in its notebook is short of `role` (Role.EDITOR to change or remove it)."""
    attachment = get_object_or_404(
        _visible_attachments(user=user).select_related("note", "note__notebook"), pk=attachment_id
    )
    notebook_check(user=user, notebook=attachment.note.notebook, role=role)
    return attachment


def searchable_attachments(
    *, user: User, notebook_id: int | None = None
) -> QuerySet[NoteAttachment]:
    """Searchable attachments (ready, or processing with their words indexed) on live notes
    the user may see (optionally of one notebook): what search can find, for its file filter."""
    notes = visible_notes(user=user).filter(trashed_at__isnull=True)
    if notebook_id is not None:
        notes = notes.filter(notebook_id=notebook_id)
    return (
        NoteAttachment.objects.filter(NoteAttachment.searchable_q(), note__in=notes)
        .select_related("note")
        .order_by("original_name", "pk")
    )


def attachment_pages(*, user: User, attachment_id: int) -> QuerySet[DocumentPage]:
    """The extracted pages of one visible attachment, in order."""
    attachment = attachment_get(user=user, attachment_id=attachment_id)
    return DocumentPage.objects.filter(attachment=attachment).order_by("number")


def uploaded_bytes(user_id: int) -> int:
    """Bytes of the files this user uploaded (their share of the quota, core.quota)."""

    total = NoteAttachment.objects.filter(uploaded_by_id=user_id).aggregate(s=Sum("size"))["s"]
    return int(total or 0)
