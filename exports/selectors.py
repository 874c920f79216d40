"""What deleting an account would remove, counted for the confirmation page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from accounts.selectors import api_token_list
from attachments.selectors import notebook_sources
from chat.selectors import conversation_list
from notes.models import Notebook, NotebookMembership
from notes.selectors import membership_list, note_list, notebook_list

if TYPE_CHECKING:
    from core.types import User


@dataclass(frozen=True)
class Holdings:
    notebooks: int
    notes: int
    sources: int
    conversations: int
    tokens: int


def account_holdings(*, user: User) -> Holdings:
    """Counts of what the user owns (notebooks with their notes and sources) and keeps
    (their conversations anywhere, their tokens); only the user's own rows."""
    owned = list(notebook_list(user=user).filter(owner=user).values_list("pk", flat=True))
    notes = sum(
        note_list(user=user, notebook_id=pk).count()
        + note_list(user=user, notebook_id=pk, trashed=True).count()
        for pk in owned
    )
    sources = sum(notebook_sources(user=user, notebook_id=pk).count() for pk in owned)
    return Holdings(
        notebooks=len(owned),
        notes=notes,
        sources=sources,
        conversations=conversation_list(user=user).count(),
        tokens=api_token_list(user=user).filter(revoked_at__isnull=True).count(),
    )


def shared_owned(*, user: User) -> list[tuple[Notebook, list[NotebookMembership]]]:
    """The notebooks the user owns that are shared with others, each with its members (whom
    an account deletion can hand it to)."""
    owned = notebook_list(user=user).filter(owner=user, memberships__isnull=False).distinct()
    return [
        (notebook, list(membership_list(user=user, notebook_id=notebook.pk)))
        for notebook in owned.order_by("title", "pk")
    ]
