"""Writes to notebooks and notes. Callers pass objects fetched through notes.selectors, which
already checked that the user may see them; services validate input and own their transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import BigIntegerField, F, Func, Sum
from django.db.models.expressions import CombinedExpression
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.translation import gettext, gettext_noop

from core.quota import check_quota, lock_storage_of
from core.websocket import user_sockets_tell
from notes.indexing import note_enqueue_embedding, note_index_text
from notes.models import Note, Notebook, NotebookMembership, Role

if TYPE_CHECKING:
    from core.types import User

# Stored as the title, translated into the language of whoever created the note.
UNTITLED_NOTE = gettext_noop("Untitled note")


def _clean_title(title: str, *, required: bool, fallback: str = "") -> str:
    title = " ".join(title.split())  # no newlines or runs of spaces in titles
    if not title:
        if required:
            raise ValidationError({"title": gettext("Give it a title.")}, code="required")
        title = gettext(fallback) if fallback else fallback
    if len(title) > settings.NOTE_TITLE_MAX:
        raise ValidationError(
            {
                "title": gettext("Keep the title under %(limit)d characters.")
                % {"limit": settings.NOTE_TITLE_MAX}
            },
            code="max_length",
        )
    return title


def _clean_body(body: str) -> str:
    if len(body) > settings.NOTE_BODY_MAX_CHARS:
        raise ValidationError(
            {
                "body": gettext("A note holds at most %(limit)s characters.")
                % {"limit": number_format(settings.NOTE_BODY_MAX_CHARS, force_grouping=True)}
            },
            code="max_length",
        )
    return body


def _clean_description(description: str) -> str:
    description = description.strip()
    if len(description) > 2000:
        raise ValidationError(
            {"description": gettext("Keep the description under 2,000 characters.")}
        )
    return description


def notebook_create(*, owner: User, title: str, description: str = "") -> Notebook:
    """Create a notebook owned by `owner`."""
    return Notebook.objects.create(
        owner=owner,
        title=_clean_title(title, required=True),
        description=_clean_description(description),
    )


def notebook_update(
    *, notebook: Notebook, title: str | None = None, description: str | None = None
) -> Notebook:
    """Rename a notebook and/or change its description; fields left None are kept."""
    if title is not None:
        notebook.title = _clean_title(title, required=True)
    if description is not None:
        notebook.description = _clean_description(description)
    notebook.save(update_fields=["title", "description", "updated_at"])
    return notebook


def notebook_delete(*, notebook: Notebook) -> None:
    """Delete a notebook with all its notes (trashed or not), in one transaction."""
    with transaction.atomic():
        notebook.delete()


def _touch(notebook: Notebook) -> None:
    # Keeps "recently changed" ordering of the notebook list true when its notes change.
    Notebook.objects.filter(pk=notebook.pk).update(updated_at=timezone.now())


def note_create(
    *, notebook: Notebook, author: User, title: str = "", body: str = "", from_file: str = ""
) -> Note:
    """Create a note in `notebook`; a blank title becomes "Untitled note". `from_file` names
    the uploaded text file the note was made from."""
    title = _clean_title(title, required=False, fallback=UNTITLED_NOTE)
    body = _clean_body(body)
    with transaction.atomic():
        _check_quota(author_id=author.pk, title=title, body=body)
        note = Note.objects.create(
            notebook=notebook, author=author, last_edited_by=author, title=title, body=body,
            from_file=from_file[:255],
        )  # fmt: skip
        _touch(notebook)
        _reindex(note)
    return note


def note_update(
    *, note: Note, title: str | None = None, body: str | None = None, editor: User | None = None
) -> Note:
    """Change a note's title and/or body; fields left None are kept. Trashed notes are read-only.
    `editor` (who saves it) is shown as the note's last editor; the author's quota pays."""
    if note.is_trashed:
        raise ValidationError(
            gettext("Restore the note from the trash before editing it."), code="trashed"
        )
    if title is not None:
        note.title = _clean_title(title, required=False, fallback=UNTITLED_NOTE)
    if body is not None:
        note.body = _clean_body(body)
    with transaction.atomic():
        _check_quota(author_id=note.author_id, title=note.title, body=note.body, note_id=note.pk)
        fields = ["title", "body", "updated_at"]
        if editor is not None:
            note.last_edited_by = editor
            fields.append("last_edited_by")
        note.save(update_fields=fields)
        _touch(note.notebook)
        _reindex(note)
    return note


def _check_quota(
    *, author_id: int | None, title: str, body: str, note_id: int | None = None
) -> None:
    """Notes count toward their author's storage quota (core.quota), checked under the
    author's storage lock; an edit counts only what it adds. (A note whose author's account
    is gone counts toward nobody's.)"""
    if author_id is None:
        return
    lock_storage_of(user_id=author_id)
    freed = 0
    if note_id is not None:
        freed = (
            Note.objects.filter(pk=note_id)
            .annotate(size=note_bytes_sql())
            .values_list("size", flat=True)
            .first()
        ) or 0
    size = len(title.encode()) + len(body.encode())
    check_quota(user_id=author_id, name=title, size=size, freed=freed)


def note_bytes_sql() -> CombinedExpression:
    """A note's bytes as stored (UTF-8): title and body."""
    return Func(F("title"), function="octet_length", output_field=BigIntegerField()) + Func(
        F("body"), function="octet_length", output_field=BigIntegerField()
    )


def notes_bytes(user_id: int) -> int:
    """Bytes of the notes this user wrote (their share of the quota, core.quota), the
    trash included: trashed notes are stored until deleted."""
    total = Note.objects.filter(author_id=user_id).aggregate(s=Sum(note_bytes_sql()))["s"]
    return int(total or 0)


def _reindex(note: Note) -> None:
    """Keyword-searchable at once, semantically searchable once the worker embedded it."""
    note_index_text(note_id=note.pk)
    note_enqueue_embedding(note_id=note.pk)


def note_trash(*, note: Note) -> Note:
    """Move a note to the trash (idempotent)."""
    if note.trashed_at is None:
        note.trashed_at = timezone.now()
        note.save(update_fields=["trashed_at"])
    return note


def note_restore(*, note: Note) -> Note:
    """Bring a note back from the trash (idempotent)."""
    if note.trashed_at is not None:
        note.trashed_at = None
        note.save(update_fields=["trashed_at", "updated_at"])
    return note


def note_delete(*, note: Note) -> None:
    """Delete a trashed note forever; a live note must go to the trash first."""
    if not note.is_trashed:
        raise ValidationError(
            gettext("Move the note to the trash before deleting it forever."), code="not_trashed"
        )
    note.delete()


# --- sharing -----------------------------------------------------------------------------------

SHAREABLE_ROLES = (Role.VIEWER, Role.EDITOR)


def _role(role: str) -> Role:
    if role not in SHAREABLE_ROLES:
        raise ValidationError({"role": gettext("Choose viewer or editor.")}, code="invalid")
    return Role(role)


def _find_user(identifier: str) -> User:
    """The active user with this username or email address (case-insensitive)."""
    identifier = identifier.strip()
    if not identifier:
        raise ValidationError({"user": gettext("Give a username or an email address.")})
    users = get_user_model().objects.filter(is_active=True)
    found = list(users.filter(username__iexact=identifier)[:2])
    if not found and "@" in identifier:
        found = list(users.filter(email__iexact=identifier)[:2])
    if len(found) != 1:
        message = (
            gettext("Several accounts use “%(who)s”: give the username instead.")
            if found
            else gettext("No one on this instance is called “%(who)s”.")
        )
        raise ValidationError({"user": message % {"who": identifier[:100]}}, code="invalid")
    return found[0]


def _access_changed(notebook: Notebook, *user_ids: int) -> None:
    """Their open sockets check afresh whether they may still see this notebook's things."""
    for user_id in user_ids:
        user_sockets_tell(
            user_id=user_id, event={"type": "access.changed", "notebook_id": notebook.pk}
        )


def membership_add(
    *, notebook: Notebook, by: User, identifier: str, role: str = Role.VIEWER
) -> NotebookMembership:
    """Share the notebook with the user named by `identifier` (username or email) as viewer
    or editor; sharing again with someone already a member changes their role."""
    chosen = _role(role)
    member = _find_user(identifier)
    if member.pk == notebook.owner_id:
        raise ValidationError({"user": gettext("That is the notebook's owner.")}, code="invalid")
    with transaction.atomic():
        # get_or_create copes with another request adding them at the same moment.
        membership, created = NotebookMembership.objects.get_or_create(
            notebook=notebook, user=member, defaults={"role": chosen, "added_by": by}
        )
        if not created and membership.role != chosen:
            membership = membership_set_role(membership=membership, role=chosen)
    return membership


def membership_set_role(*, membership: NotebookMembership, role: str) -> NotebookMembership:
    """Make a member a viewer or an editor; taking editing away takes effect at once."""
    chosen = _role(role)
    if membership.role != chosen:
        membership.role = chosen
        membership.save(update_fields=["role"])
        _access_changed(membership.notebook, membership.user_id)
    return membership


def membership_remove(*, membership: NotebookMembership) -> None:
    """Revoke a member's access (or a member leaves): their next request, API call, MCP call
    and open socket find nothing of the notebook. Their own conversations and memories in it
    stay theirs but out of reach (every read of them checks the notebook too), and come back
    if the notebook is shared with them again."""
    notebook, user_id = membership.notebook, membership.user_id
    with transaction.atomic():
        membership.delete()
        _access_changed(notebook, user_id)


def notebook_transfer(*, notebook: Notebook, to: NotebookMembership) -> Notebook:
    """Hand the notebook to one of its members: they become its owner, the old owner stays
    on as an editor."""
    if to.notebook_id != notebook.pk:
        raise ValidationError({"user": gettext("Only a member can become the owner.")})
    with transaction.atomic():
        locked = Notebook.objects.select_for_update().get(pk=notebook.pk)
        old_owner_id, new_owner_id = locked.owner_id, to.user_id
        to.delete()
        NotebookMembership.objects.update_or_create(
            notebook=locked, user_id=old_owner_id, defaults={"role": Role.EDITOR}
        )
        locked.owner_id = new_owner_id
        locked.save(update_fields=["owner", "updated_at"])
        _access_changed(locked, old_owner_id, new_owner_id)
    return locked
