"""Profiles as their owner sees them: scoped through attachments' selectors (another user's
source is a 404)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attachments.models import NoteAttachment
from attachments.selectors import attachment_get
from intelligence.models import SourceProfile
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
