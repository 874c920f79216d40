"""Intelligence's model: a source's profile. Its table is still `attachments_sourceprofile`,
the name it was created under when the model lived in `attachments` (moved in state only:
intelligence migration 0002, attachments 0013)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import pgettext_lazy
from pgvector.django import HnswIndex, VectorField

from attachments.models import NoteAttachment


class SourceProfile(models.Model):
    """What a source is: its document type, a human-friendly name, type-specific structured
    data and a document-level vector of its canonical text. Written in the background by
    `intelligence` after the source is ready.

    `token` fences the runs like guides: every request bumps it, and a run writes only while
    the row still carries the token it was queued with. `edited` marks the owner's own
    name/type/data: a regeneration keeps those and refreshes only the rest. `name_accepted`
    marks the owner's explicit choice of the suggested file name for downloads (until then a
    source is shown and downloaded under the name it was uploaded with)."""

    class DocType(models.TextChoices):
        INVOICE = "invoice", pgettext_lazy("document type", "Invoice")
        RECEIPT = "receipt", pgettext_lazy("document type", "Receipt")
        FLIGHT_TICKET = "flight_ticket", pgettext_lazy("document type", "Flight ticket")
        ORDER_CONFIRMATION = (
            "order_confirmation",
            pgettext_lazy("document type", "Order confirmation"),
        )
        OTHER = "other", pgettext_lazy("document type", "Other")

    class Status(models.TextChoices):
        PENDING = "pending", pgettext_lazy("profile status", "Queued")
        PROCESSING = "processing", pgettext_lazy("profile status", "Being analysed")
        READY = "ready", pgettext_lazy("profile status", "Ready")
        FAILED = "failed", pgettext_lazy("profile status", "Failed")

    attachment = models.OneToOneField(
        NoteAttachment, on_delete=models.CASCADE, related_name="profile"
    )
    doc_type = models.CharField(max_length=24, choices=DocType.choices, default=DocType.OTHER)
    confidence = models.FloatField(default=0)
    better_name = models.CharField(max_length=200, blank=True)
    doc_date = models.DateField(null=True, blank=True)
    extracted = models.JSONField(default=dict, blank=True)
    edited = models.BooleanField(default=False)
    name_accepted = models.BooleanField(default=False)
    method = models.CharField(max_length=16, blank=True)  # "llm" | "offline"
    model = models.CharField(max_length=200, blank=True)  # the chat model, for "llm"
    canonical_text = models.TextField(blank=True)
    embedding = VectorField(dimensions=settings.EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)
    timings = models.JSONField(default=dict, blank=True)  # {"classification": s, ...}

    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    token = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=0)  # runs for the current token
    error = models.TextField(blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "attachments_sourceprofile"
        indexes = [
            models.Index(fields=["doc_type"], name="profile_doc_type"),
            models.Index(fields=["status", "heartbeat_at"], name="profile_status_heartbeat"),
            HnswIndex(
                name="sourceprofile_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_doc_type_display()}: {self.better_name or self.attachment_id}"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.PROCESSING)

    @property
    def recognised(self) -> bool:
        """Whether the type, suggested name and data are worth showing: the owner's own
        correction, or a ready profile of a known type (not Other) whose confidence reaches
        PROFILE_MIN_CONFIDENCE. Otherwise nothing of the profile is shown."""
        if self.edited:
            return True
        return (
            self.status == self.Status.READY
            and self.doc_type != self.DocType.OTHER
            and self.confidence >= settings.PROFILE_MIN_CONFIDENCE
        )


def recognised_q(prefix: str = "") -> Q:
    """`SourceProfile.recognised` as a filter; `prefix` reaches the profile from another model
    ("profile__" from NoteAttachment)."""
    edited = Q(**{f"{prefix}edited": True})
    confident = Q(
        **{
            f"{prefix}status": SourceProfile.Status.READY,
            f"{prefix}confidence__gte": settings.PROFILE_MIN_CONFIDENCE,
        }
    ) & ~Q(**{f"{prefix}doc_type": SourceProfile.DocType.OTHER})
    return edited | confident


def known_type_q(prefix: str = "") -> Q:
    """Profiles shown with one of the known types (recognised, not Other): what a type filter
    other than Other matches; Other matches every source outside it."""
    return recognised_q(prefix) & ~Q(**{f"{prefix}doc_type": SourceProfile.DocType.OTHER})
