"""Profiles as their owner sees them: scoped through attachments' selectors (another user's
source is a 404, and counts for nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attachments.models import NoteAttachment
from attachments.selectors import attachment_get, searchable_attachments
from intelligence.models import SourceProfile, known_type_q
from notes.models import Role

if TYPE_CHECKING:
    from core.types import User


def source_get(*, user: User, attachment_id: int, role: Role = Role.VIEWER) -> NoteAttachment:
    """A source the user may see (Http404 otherwise; PermissionDenied if their role in its
    notebook is short of `role`), with its profile loaded when it has one."""
    attachment = attachment_get(user=user, attachment_id=attachment_id, role=role)
    return NoteAttachment.objects.select_related("note", "note__notebook", "profile").get(
        pk=attachment.pk
    )


def profile_of(attachment: NoteAttachment) -> SourceProfile | None:
    try:
        return attachment.profile
    except SourceProfile.DoesNotExist:
        return None


def doc_types_present(*, user: User, notebook_id: int | None = None) -> set[str]:
    """The document types shown among the searchable sources the user may see (a shared
    notebook's for its members, never another user's; optionally of one notebook): each known
    type recognised at least once, and "other" beside them when some source has none. Empty
    when nothing was recognised: no type filter is worth offering."""
    sources = searchable_attachments(user=user, notebook_id=notebook_id).order_by()
    known = sources.filter(known_type_q("profile__"))
    present = set(known.values_list("profile__doc_type", flat=True).distinct())
    if present and sources.exclude(known_type_q("profile__")).exists():
        present.add(SourceProfile.DocType.OTHER)
    return present
