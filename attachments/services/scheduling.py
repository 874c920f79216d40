"""Which pending file an ingestion run takes (fair across uploaders, not first in first out),
and requeuing files whose run or task was lost."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, F, Max, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from attachments.models import NoteAttachment
from attachments.services.files import enqueue_ingest, unlocked_path

logger = logging.getLogger(__name__)

Status = NoteAttachment.Status
Stage = NoteAttachment.Stage
CLAIM_CANDIDATES = 5  # fairest pending files a run tries to claim before its own


def claim_fairest(attachment_id: int) -> int | None:
    """Claim a pending file for this run (conditional UPDATE) and return its id, or None.

    Every pending file has a task queued, but the queue is first in, first out: one user's
    batch of 50 would make everyone else's files wait behind it. So a task runs the oldest
    waiting file of the uploader with the fewest files being processed right now and, among
    equals, the one whose files ran longest ago (or never): uploaders take turns. A file passed
    over keeps its place; a later task (the one of the file run now) picks it up."""
    # Of the uploader's files: how many are being processed, and when one last ran.
    running = (
        NoteAttachment.objects.filter(status=Status.PROCESSING, uploaded_by=OuterRef("uploaded_by"))
        .values("uploaded_by")
        .annotate(n=Count("pk"))
        .values("n")
    )
    served = (
        NoteAttachment.objects.filter(uploaded_by=OuterRef("uploaded_by"))
        .exclude(status=Status.PENDING)
        .values("uploaded_by")
        .annotate(at=Max("heartbeat_at"))
        .values("at")
    )
    now = timezone.now()
    # Files waiting out a retry's backoff are run by their scheduled task, when it is due.
    waiting = NoteAttachment.objects.filter(status=Status.PENDING).filter(
        Q(not_before__isnull=True) | Q(not_before__lte=now)
    )
    fairest = list(
        waiting.annotate(running=Coalesce(Subquery(running), 0), served=Subquery(served))
        .order_by("running", F("served").asc(nulls_first=True), "created_at", "pk")
        .values_list("pk", flat=True)[:CLAIM_CANDIDATES]
    )
    for pk in [*fairest, attachment_id]:  # another worker may take a candidate first
        if waiting.filter(pk=pk).update(
            status=Status.PROCESSING,
            stage=Stage.EXTRACTING,
            progress_current=0,
            progress_total=0,
            error="",
            attempts=F("attempts") + 1,
            heartbeat_at=now,
            not_before=None,
        ):
            return pk
    return None


def attachment_reap_stuck() -> int:
    """Requeue (or, after too many runs, fail) attachments whose run stopped reporting, and
    requeue pending ones whose task was lost. Returns how many rows it touched."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.INGEST_STALE_SECONDS)
    touched = 0
    for att in NoteAttachment.objects.filter(status=Status.PROCESSING, heartbeat_at__lt=cutoff):
        rows = NoteAttachment.objects.filter(
            pk=att.pk, status=Status.PROCESSING, attempts=att.attempts
        )
        if att.attempts >= settings.INGEST_MAX_ATTEMPTS:
            touched += rows.update(
                status=Status.FAILED,
                error=f"Processing stopped {att.attempts} times without finishing (the worker "
                "crashed or ran out of time). Reprocess to try again.",
            )
            unlocked_path(att).unlink(missing_ok=True)
        elif rows.update(
            status=Status.PENDING,
            stage=Stage.QUEUED,
            heartbeat_at=now,
            error="Restarted: the previous run stopped responding.",
        ):
            touched += 1
            enqueue_ingest(att.pk)
    lost = NoteAttachment.objects.filter(status=Status.PENDING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff)
    )
    for att in lost:
        if NoteAttachment.objects.filter(pk=att.pk, status=Status.PENDING).update(heartbeat_at=now):
            touched += 1
            enqueue_ingest(att.pk)
    if touched:
        logger.warning("reaper touched %s stuck attachment(s)", touched)
    return touched
