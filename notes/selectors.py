"""Reads of notebooks and notes, always scoped to what `user` may see.

A user sees the notebooks they own and those shared with them (NotebookMembership); every read
below, and every other app's, goes through `_visible_notebooks`, so nothing else decides who
sees a notebook. A write asks for a role (`role=Role.EDITOR`, `Role.OWNER`): a member whose
role is short of it gets PermissionDenied (403: they can see the thing, not change it); anyone
else gets Http404, exactly like a missing object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict, cast

from django.core.exceptions import PermissionDenied
from django.db.models import (
    Case,
    CharField,
    Count,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Lower
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext_lazy as _

from accounts.models import scope_of
from notes.models import ROLE_RANK, Note, Notebook, NotebookMembership, Role

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    from core.types import User


class NotebookAnnotations(TypedDict):
    note_count: int
    source_count: int
    role: str


def _visible_notebooks(*, user: User) -> QuerySet[Notebook]:
    shared = NotebookMembership.objects.filter(user=user).values("notebook_id")
    notebooks = Notebook.objects.filter(Q(owner=user) | Q(pk__in=shared))
    # A request made with a personal access token limited to some notebooks (the API, MCP)
    # sees only those of them the user may still see: every read below narrows with it.
    scope = scope_of(user)
    if scope is not None and scope.notebook_ids is not None:
        notebooks = notebooks.filter(pk__in=scope.notebook_ids)
    return notebooks


def _with_role(notebooks: QuerySet[Notebook], *, user: User) -> QuerySet[Notebook]:
    member_role = NotebookMembership.objects.filter(notebook=OuterRef("pk"), user=user).values(
        "role"
    )[:1]
    return notebooks.annotate(
        role=Case(
            When(owner=user, then=Value(Role.OWNER.value)),
            default=Subquery(member_role),
            output_field=CharField(),
        )
    )


# A note that only holds sources: made for a dropped file (a PDF, a page, a recording …) and
# not written in. The Sources pane shows it as its sources; the Notes pane and the notebook's
# note count leave it out until someone writes in it. (`attachments` is the reverse relation
# of the sources' app above, read by name: this layer does not import it.)
HOLDS_ONLY_SOURCES = Q(body="") & Q(attachments__isnull=False)


def written_notes(notes: QuerySet[Note]) -> QuerySet[Note]:
    """`notes` without those that only hold sources (HOLDS_ONLY_SOURCES)."""
    holders = Note.objects.filter(HOLDS_ONLY_SOURCES).values("pk")
    return notes.exclude(pk__in=holders)


def visible_notes(*, user: User) -> QuerySet[Note]:
    """Every note (trashed or not) in a notebook the user may see; other apps scope through it."""
    return Note.objects.filter(notebook__in=_visible_notebooks(user=user))


def notebook_list(*, user: User) -> QuerySet[WithAnnotations[Notebook, NotebookAnnotations]]:
    """The notebooks the user owns or is a member of, newest first, each with `note_count`
    (written notes not in the trash: a note that only holds a dropped file is counted as
    that source, not as a note), `source_count` (the files of its live notes) and the user's
    `role` in it ("owner", "editor", "viewer")."""
    written = (
        written_notes(Note.objects.filter(notebook=OuterRef("pk"), trashed_at__isnull=True))
        .order_by()
        .values("notebook")
        .annotate(n=Count("pk"))
        .values("n")
    )
    # The files of its live notes, read through the sources' reverse relation (by name).
    files = (
        Note.objects.filter(notebook=OuterRef("pk"), trashed_at__isnull=True)
        .order_by()
        .values("notebook")
        .annotate(n=Count("attachments"))
        .values("n")
    )
    notebooks = _with_role(_visible_notebooks(user=user), user=user).annotate(
        note_count=Coalesce(Subquery(written, output_field=IntegerField()), 0),
        source_count=Coalesce(Subquery(files, output_field=IntegerField()), 0),
    )
    return cast("QuerySet[WithAnnotations[Notebook, NotebookAnnotations]]", notebooks)


def notebook_choices(user: User) -> list[tuple[int, str]]:
    """(id, title) of the notebooks the user may see, by title: what a token can be limited
    to."""
    return list(_visible_notebooks(user=user).order_by("title", "pk").values_list("pk", "title"))


def role_allows(role: str, needed: Role) -> bool:
    return ROLE_RANK.get(Role(role), 0) >= ROLE_RANK[needed] if role else False


def notebook_role(*, user: User, notebook: Notebook) -> str:
    """The user's role in a notebook ("owner", "editor", "viewer"), "" for none."""
    if notebook.owner_id == user.pk:
        return Role.OWNER.value
    membership = NotebookMembership.objects.filter(notebook=notebook, user=user).first()
    return membership.role if membership else ""


def notebook_check(*, user: User, notebook: Notebook, role: Role) -> None:
    """PermissionDenied unless the user's role in this (visible) notebook reaches `role`."""
    if role is Role.VIEWER:
        return
    current = getattr(notebook, "role", None)
    if current is None:
        current = notebook_role(user=user, notebook=notebook)
    if not role_allows(current, role):
        raise PermissionDenied(_REFUSALS[role])
    scope = scope_of(user)  # a read-only token changes nothing, whatever the user's role
    if scope is not None and scope.read_only:
        raise PermissionDenied(_("This token is read-only."))


_REFUSALS = {
    Role.EDITOR: _(
        "You can read this notebook but not change it: ask its owner to make you an editor."
    ),
    Role.OWNER: _("Only the notebook's owner can do this."),
}


def notebook_get(
    *, user: User, notebook_id: int, role: Role = Role.VIEWER
) -> WithAnnotations[Notebook, NotebookAnnotations]:
    """One notebook the user may see, with `note_count` and `role`; Http404 otherwise, and
    PermissionDenied if the user's role there is short of `role`."""
    notebook = get_object_or_404(notebook_list(user=user), pk=notebook_id)
    notebook_check(user=user, notebook=notebook, role=role)
    return notebook


def note_list(
    *, user: User, notebook_id: int, trashed: bool = False, written: bool = False
) -> QuerySet[Note]:
    """Notes of one visible notebook: the live ones, or with `trashed=True` the trash; with
    `written=True` without those that only hold sources (what the Notes pane lists)."""
    notebook = notebook_get(user=user, notebook_id=notebook_id)
    notes = Note.objects.filter(notebook=notebook, trashed_at__isnull=not trashed)
    if written:
        notes = written_notes(notes)
    return notes.select_related("notebook", "author", "last_edited_by").order_by(
        "-trashed_at" if trashed else "-updated_at"
    )


def file_note_list(*, user: User, notebook_id: int) -> QuerySet[Note]:
    """The live notes of one visible notebook made from uploaded Markdown or text files (the
    Sources pane lists them beside the files), by title."""
    notebook = notebook_get(user=user, notebook_id=notebook_id)
    return Note.objects.filter(
        notebook=notebook, trashed_at__isnull=True, from_file__gt=""
    ).order_by(Lower("title"), "pk")


def note_get(
    *, user: User, note_id: int, include_trashed: bool = True, role: Role = Role.VIEWER
) -> Note:
    """One note in a notebook the user may see; Http404 otherwise (or if trashed, unless asked),
    PermissionDenied if the user's role there is short of `role`."""
    notes = visible_notes(user=user).select_related("notebook", "author", "last_edited_by")
    if not include_trashed:
        notes = notes.filter(trashed_at__isnull=True)
    note = get_object_or_404(notes, pk=note_id)
    notebook_check(user=user, notebook=note.notebook, role=role)
    return note


def membership_list(*, user: User, notebook_id: int) -> QuerySet[NotebookMembership]:
    """The members of a notebook the user may see (any member sees who has access)."""
    notebook = notebook_get(user=user, notebook_id=notebook_id)
    return NotebookMembership.objects.filter(notebook=notebook).select_related("user")


def membership_get(*, user: User, notebook_id: int, member_id: int) -> NotebookMembership:
    """One member (by user id) of a notebook the user owns; Http404 for anyone else."""
    notebook = notebook_get(user=user, notebook_id=notebook_id, role=Role.OWNER)
    return get_object_or_404(
        NotebookMembership.objects.filter(notebook=notebook).select_related("user"),
        user_id=member_id,
    )


FILES_NAMED = 10  # the delete confirmation names at most this many files


class NotebookContents(TypedDict):
    files: list[str]
    file_count: int
    conversation_count: int
    member_count: int


def notebook_contents(*, user: User, notebook_id: int) -> NotebookContents:
    """What deleting a notebook the user owns takes with it, for its confirmation: its files
    (the first FILES_NAMED by name), every conversation in it (its members' too) and how
    many people it is shared with. Read through the reverse relations of the apps above
    (sources, conversations), which this layer does not import."""
    notebook = notebook_get(user=user, notebook_id=notebook_id, role=Role.OWNER)
    names = (
        Note.objects.filter(notebook=notebook, attachments__isnull=False)
        .order_by("attachments__original_name")
        .values_list("attachments__original_name", flat=True)
    )
    return {
        "files": [str(name) for name in names[:FILES_NAMED]],
        "file_count": names.count(),
        "conversation_count": Notebook.objects.filter(pk=notebook.pk).aggregate(
            n=Count("conversations")
        )["n"],
        "member_count": NotebookMembership.objects.filter(notebook=notebook).count(),
    }
