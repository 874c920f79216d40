"""Deleting an account with everything its user owns.

It lives here, above every app whose rows and files a user owns, so that it can delete them
through their own services (notes.services.notebook_delete: the notebook's notes, sources and
guides; the sources' files go once the deletion commits, attachments' post_delete receiver)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext

from accounts.services import user_sockets_close
from attachments.selectors import notebook_sources
from core.quota import lock_storage_of
from notes.selectors import membership_list, notebook_list
from notes.services import notebook_delete, notebook_transfer

if TYPE_CHECKING:
    from core.types import User


@dataclass(frozen=True)
class DeletedAccount:
    username: str
    notebooks: int
    sources: int
    handed_over: int = 0


def account_delete(*, user: User, handover: Mapping[int, int] | None = None) -> DeletedAccount:
    """Delete `user` and everything they own in one transaction: every notebook they own (its
    notes, sources, guides and everyone's conversations and memories in it), their own
    conversations and memories in notebooks of others, their memberships, tokens and queued
    jobs. Notes they wrote and files they added in others' notebooks stay there, authorless.
    Files on disk go after the commit; a rollback keeps them. Their open sockets close.

    `handover` (notebook id → user id of one of its members) keeps those shared notebooks:
    the member becomes the owner (notes.services.notebook_transfer) and the notebook, its
    notes, sources and the members' conversations stay; the leaving user's own conversations
    and memories in it go with the account. A notebook named there that the user does not
    own, or a user who is not its member, is refused (ValidationError, nothing deleted)."""
    handover = dict(handover or {})
    username = user.get_username()
    with transaction.atomic():
        # The user's storage lock (their row): an upload or note write of theirs in flight
        # finishes first, and a second deletion (another tab) waits for this one.
        lock_storage_of(user_id=user.pk)
        owned = {n.pk: n for n in notebook_list(user=user).filter(owner=user)}
        heirs = {}
        for notebook_id, heir_id in handover.items():
            member = (
                membership_list(user=user, notebook_id=notebook_id).filter(user_id=heir_id).first()
                if notebook_id in owned
                else None
            )
            if member is None:
                raise ValidationError(
                    gettext("Hand a notebook only to one of its members."), code="handover"
                )
            heirs[notebook_id] = member
        sources = deleted = 0
        for notebook in owned.values():
            if notebook.pk in heirs:
                notebook_transfer(notebook=notebook, to=heirs[notebook.pk])
                continue
            sources += notebook_sources(user=user, notebook_id=notebook.pk).count()
            notebook_delete(notebook=notebook)
            deleted += 1
        user_sockets_close(user=user)  # on commit: its group is named by the id, kept here
        user.delete()  # their memberships, conversations and memories go with the row
    return DeletedAccount(
        username=username, notebooks=deleted, sources=sources, handed_over=len(heirs)
    )
