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
from notes.selectors import notebook_list
from notes.services import notebook_delete

if TYPE_CHECKING:
    from core.types import User


@dataclass(frozen=True)
class DeletedAccount:
    username: str
    notebooks: int
    sources: int


def account_delete(*, user: User, handover: Mapping[int, int] | None = None) -> DeletedAccount:
    """Delete `user` and everything they own in one transaction: every notebook they own (its
    notes, sources, guides and everyone's conversations and memories in it), their own
    conversations and memories in notebooks of others, their tokens and queued jobs. Notes
    they wrote and files they added in others' notebooks stay there, authorless. Files on
    disk go after the commit; a rollback keeps them. Their open sockets close.

    `handover` (notebook id → id of the member who takes it over) is where notebooks with
    other members will be kept instead of deleted once sharing exists; until then it must be
    empty, and every owned notebook is deleted."""
    if handover:
        raise ValidationError(
            gettext("Notebooks cannot be handed over to someone else yet."), code="handover"
        )
    username = user.get_username()
    with transaction.atomic():
        # The user's storage lock (their row): an upload or note write of theirs in flight
        # finishes first, and a second deletion (another tab) waits for this one.
        lock_storage_of(user_id=user.pk)
        owned = list(notebook_list(user=user).filter(owner=user))
        sources = 0
        for notebook in owned:
            # The place for shared notebooks: one in `handover` changes owner here instead.
            sources += notebook_sources(user=user, notebook_id=notebook.pk).count()
            notebook_delete(notebook=notebook)
        user_sockets_close(user=user)  # on commit: its group is named by the id, kept here
        user.delete()
    return DeletedAccount(username=username, notebooks=len(owned), sources=sources)
