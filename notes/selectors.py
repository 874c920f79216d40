"""Reads of notebooks and notes, always scoped to what `user` may see.

Today a user sees the notebooks they own. Sharing will widen `_visible_notebooks` (owner or member)
and every read below follows, because nothing else touches Notebook/Note querysets for users.
Another user's object raises Http404, exactly like a missing one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.db.models import Count, Q, QuerySet
from django.shortcuts import get_object_or_404

from accounts.models import scope_of
from notes.models import Note, Notebook

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    from core.types import User


class NoteCount(TypedDict):
    note_count: int


def _visible_notebooks(*, user: User) -> QuerySet[Notebook]:
    notebooks = Notebook.objects.filter(owner=user)
    # A request made with a personal access token limited to some notebooks (the API, MCP)
    # sees only those of them the user may still see: every read below narrows with it.
    scope = scope_of(user)
    if scope is not None and scope.notebook_ids is not None:
        notebooks = notebooks.filter(pk__in=scope.notebook_ids)
    return notebooks


def visible_notes(*, user: User) -> QuerySet[Note]:
    """Every note (trashed or not) in a notebook the user may see; other apps scope through it."""
    return Note.objects.filter(notebook__in=_visible_notebooks(user=user))


def notebook_list(*, user: User) -> QuerySet[WithAnnotations[Notebook, NoteCount]]:
    """The user's notebooks, newest first, each with `note_count` (notes not in the trash)."""
    return _visible_notebooks(user=user).annotate(
        note_count=Count("notes", filter=Q(notes__trashed_at__isnull=True))
    )


def notebook_choices(user: User) -> list[tuple[int, str]]:
    """(id, title) of the user's notebooks, by title: what a token can be limited to."""
    return list(_visible_notebooks(user=user).order_by("title", "pk").values_list("pk", "title"))


def notebook_get(*, user: User, notebook_id: int) -> Notebook:
    """One notebook the user may see, with `note_count`; Http404 otherwise."""
    return get_object_or_404(notebook_list(user=user), pk=notebook_id)


def note_list(*, user: User, notebook_id: int, trashed: bool = False) -> QuerySet[Note]:
    """Notes of one visible notebook: the live ones, or with `trashed=True` the trash."""
    notebook = notebook_get(user=user, notebook_id=notebook_id)
    return (
        Note.objects.filter(notebook=notebook, trashed_at__isnull=not trashed)
        .select_related("notebook", "author")
        .order_by("-trashed_at" if trashed else "-updated_at")
    )


def note_get(*, user: User, note_id: int, include_trashed: bool = True) -> Note:
    """One note in a notebook the user may see; Http404 otherwise (or if trashed, unless asked)."""
    notes = visible_notes(user=user).select_related("notebook", "author")
    if not include_trashed:
        notes = notes.filter(trashed_at__isnull=True)
    return get_object_or_404(notes, pk=note_id)
