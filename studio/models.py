"""Studio outputs: what one click turns a notebook's sources into (a briefing, a study guide,
an FAQ, a timeline, a mind map, flashcards, a quiz), written in the background and kept with
the notebook. Every statement in one is a verified quote of a source, or (written by a chat
model) a sentence checked against the passages it cites."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from notes.models import Notebook


class StudioOutput(models.Model):
    """One output. `token` fences the runs: a regenerate or a cancel bumps it, and a run
    writes only while the row still carries the token it was queued with (studio.services)."""

    class Kind(models.TextChoices):
        BRIEFING = "briefing", _("Briefing")
        STUDY_GUIDE = "study_guide", _("Study guide")
        FAQ = "faq", _("FAQ")
        TIMELINE = "timeline", _("Timeline")
        MIND_MAP = "mind_map", _("Mind map")
        FLASHCARDS = "flashcards", _("Flashcards")
        QUIZ = "quiz", _("Quiz")
        AUDIO = "audio", _("Audio overview")

    class Status(models.TextChoices):
        PENDING = "pending", _("Queued")
        PROCESSING = "processing", _("Being written")
        READY = "ready", _("Ready")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")

    class Generator(models.TextChoices):
        OFFLINE = "offline", _("Quoted from the sources")
        LLM = "llm", _("Chat model")

    notebook = models.ForeignKey(Notebook, on_delete=models.CASCADE, related_name="studio_outputs")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    title = models.CharField(max_length=200, blank=True)
    # The sources it is written from, as source refs ("attachment:5", "note:3"); [] for all
    # of the notebook's sources when it was asked for.
    scope = models.JSONField(default=list, blank=True)
    language = models.CharField(max_length=16, blank=True)  # the UI language it was asked in

    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    token = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=0)  # runs for the current token
    progress = models.PositiveSmallIntegerField(default=0)  # percent
    stage = models.CharField(max_length=40, blank=True)
    error = models.TextField(blank=True)
    requested_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)

    generator = models.CharField(max_length=10, choices=Generator.choices, blank=True)
    model = models.CharField(max_length=200, blank=True)
    # {"sections": [{"heading", "items": [...]}], "citations": [{"n", "kind", "quote",
    #  "attachment_id", "file", "page", "where"?, "note_id"?, "note_title"?}], ...}: the
    # items' shape depends on the kind (studio.services.building).
    content = models.JSONField(default=dict, blank=True)
    timings = models.JSONField(default=dict, blank=True)
    # An audio overview's MP3 (studio.services.audio); removed with the row (StudioConfig).
    audio = models.FileField(upload_to="studio/audio/", max_length=255, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(fields=["notebook", "-created_at"]),
            models.Index(fields=["status", "heartbeat_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} of notebook {self.notebook_id}"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.PROCESSING)
