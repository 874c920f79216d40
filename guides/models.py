"""Guides: what a source (one PDF) or a whole notebook is about, written in the background."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q

from attachments.models import NoteAttachment
from notes.models import Notebook


class Guide(models.Model):
    """The guide of one attachment (`attachment` set) or of a notebook (`attachment` null):
    a summary (offline: a source's own introduction or the central sentences, verbatim; with a
    chat model: cited model sentences), key topics, the heading outline and suggested
    questions retrieval can answer.

    `token` fences the runs: every request for a new guide bumps it, and a task writes only
    while the row still carries the token it was queued with (see guides.services)."""

    class Kind(models.TextChoices):
        SOURCE = "source", "Source guide"
        NOTEBOOK = "notebook", "Notebook guide"

    class Status(models.TextChoices):
        PENDING = "pending", "Queued"
        PROCESSING = "processing", "Being written"
        READY = "ready", "Ready"
        FAILED = "failed", "Failed"

    class Generator(models.TextChoices):
        OFFLINE = "offline", "Offline (quoted from the sources)"
        LLM = "llm", "Chat model"

    kind = models.CharField(max_length=10, choices=Kind.choices)
    notebook = models.ForeignKey(Notebook, on_delete=models.CASCADE, related_name="guides")
    attachment = models.OneToOneField(
        NoteAttachment, on_delete=models.CASCADE, null=True, blank=True, related_name="guide"
    )

    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    token = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=0)  # runs for the current token
    # Of the sources the guide is wanted for (`wanted`) and the sources it was written from.
    wanted = models.CharField(max_length=64, blank=True)
    built_from = models.CharField(max_length=64, blank=True)
    error = models.TextField(blank=True)
    requested_at = models.DateTimeField(null=True, blank=True)
    not_before = models.DateTimeField(null=True, blank=True)  # a delayed or retried run
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)

    generator = models.CharField(max_length=10, choices=Generator.choices, blank=True)
    model = models.CharField(max_length=200, blank=True)  # the chat model, when it wrote it
    title = models.CharField(max_length=300, blank=True)
    # [{"text", "quoted": bool, "lead": bool (a quote of the document's own introduction),
    #   "citations": [{"attachment_id", "file", "page", "quote"}]}]
    summary = models.JSONField(default=list, blank=True)
    topics = models.JSONField(default=list, blank=True)  # [str]
    # [{"text", "level", "page", "attachment_id", "file"}]
    outline = models.JSONField(default=list, blank=True)
    # [{"text" (English), "template", "subject" (shown translated: content.shown),
    #   "attachment_id", "file", "page", "chunk_id"}]: with the passage that answers it
    questions = models.JSONField(default=list, blank=True)
    sources = models.JSONField(default=list, blank=True)  # [{"attachment_id", "file"}]
    timings = models.JSONField(default=dict, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["notebook"],
                condition=Q(kind="notebook"),
                name="guide_one_per_notebook",
            ),
            models.CheckConstraint(
                condition=(Q(kind="source") & Q(attachment__isnull=False))
                | (Q(kind="notebook") & Q(attachment__isnull=True)),
                name="guide_kind_matches_attachment",
            ),
        ]
        indexes = [models.Index(fields=["status", "heartbeat_at"])]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.attachment_id or self.notebook_id}"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.PROCESSING)

    @property
    def has_content(self) -> bool:
        return bool(self.ready_at)

    @property
    def stale(self) -> bool:
        """Written from other sources than the ones it is wanted for now."""
        return bool(self.built_from) and self.built_from != self.wanted

    def content(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "summary": self.summary,
            "topics": self.topics,
            "outline": self.outline,
            "questions": self.questions,
            "sources": self.sources,
        }
