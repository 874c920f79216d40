from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.utils.translation import gettext_lazy as _
from pgvector.django import HnswIndex, VectorField


class Notebook(models.Model):
    """A collection of notes. Access goes through notes.selectors: its owner, and the users it
    is shared with (NotebookMembership), each with a role."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notebooks"
    )
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return self.title


class Role(models.TextChoices):
    """What a user may do in a notebook, each role including the ones before it."""

    VIEWER = "viewer", _("Viewer")  # read notes and sources, search, ask (own conversations)
    EDITOR = "editor", _("Editor")  # also edit notes, add and remove sources
    OWNER = "owner", _("Owner")  # also rename, delete, share; one per notebook (Notebook.owner)


ROLE_RANK = {Role.VIEWER: 1, Role.EDITOR: 2, Role.OWNER: 3}


class NotebookMembership(models.Model):
    """A notebook shared with a user who is not its owner, as viewer or editor."""

    notebook = models.ForeignKey(Notebook, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(
        max_length=10,
        choices=[(Role.VIEWER, Role.VIEWER.label), (Role.EDITOR, Role.EDITOR.label)],
        default=Role.VIEWER,
    )
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["notebook", "user"], name="membership_unique_user"),
            models.CheckConstraint(
                condition=models.Q(role__in=["viewer", "editor"]), name="membership_role_valid"
            ),
        ]
        indexes = [models.Index(fields=["user", "notebook"])]

    def __str__(self) -> str:
        return f"{self.user} in {self.notebook} ({self.role})"


class Note(models.Model):
    """A Markdown note in a notebook; `trashed_at` set means it is in the trash."""

    notebook = models.ForeignKey(Notebook, on_delete=models.CASCADE, related_name="notes")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="notes"
    )
    # Who saved the title or body last (the author until someone else edits a shared note).
    last_edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    # A note made from an uploaded Markdown or text file: that file's name ("" otherwise).
    # Such a note is listed in the Sources pane too, as a source the chat can cite.
    from_file = models.CharField(max_length=255, blank=True)
    trashed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Search (notes.indexing): the tsvector is rebuilt on every save, the vectors (NoteVector)
    # in the background; `embedding_model` names the model they came from ("" = not yet).
    search_config = models.CharField(max_length=32, default="simple")
    search_vector = SearchVectorField(null=True)
    token_len = models.PositiveIntegerField(default=0)
    embedding_model = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["notebook", "trashed_at", "-updated_at"]),
            GinIndex(fields=["search_vector"], name="note_search_vector_gin"),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def is_trashed(self) -> bool:
        return self.trashed_at is not None


class NoteVector(models.Model):
    """One embedding of a note's title and body (several overlapping windows when the note is
    longer than the embedding model's input; search keeps the best)."""

    note = models.ForeignKey(Note, on_delete=models.CASCADE, related_name="vectors")
    window = models.PositiveSmallIntegerField(default=0)
    embedding = VectorField(dimensions=settings.EMBEDDING_DIMENSIONS)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["note", "window"], name="notevector_unique_window")
        ]
        indexes = [
            HnswIndex(
                name="notevector_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.note} window {self.window}"
