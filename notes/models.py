from __future__ import annotations

from django.conf import settings
from django.db import models


class Notebook(models.Model):
    """A collection of notes. Access goes through notes.selectors (owner today, members later)."""

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


class Note(models.Model):
    """A Markdown note in a notebook; `trashed_at` set means it is in the trash."""

    notebook = models.ForeignKey(Notebook, on_delete=models.CASCADE, related_name="notes")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="notes"
    )
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    trashed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["notebook", "trashed_at", "-updated_at"])]

    def __str__(self) -> str:
        return self.title

    @property
    def is_trashed(self) -> bool:
        return self.trashed_at is not None
