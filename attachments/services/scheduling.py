"""Which pending file an ingestion run takes (fair across uploaders, not first in first out),
and how the reaper (core.fencing) requeues files whose run or task was lost."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, F, Max, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from attachments.models import NoteAttachment
from attachments.services.files import enqueue_ingest, unlocked_path
from core.fencing import FencedKind

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


def _stale(cutoff: datetime) -> QuerySet[NoteAttachment]:
    return NoteAttachment.objects.filter(status=Status.PROCESSING, heartbeat_at__lt=cutoff)


def _lost(cutoff: datetime) -> QuerySet[NoteAttachment]:
    return NoteAttachment.objects.filter(status=Status.PENDING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff)
    )


# The reaper's view of ingestion (core.fencing; registered in AttachmentsConfig.ready()): a
# run is fenced by its attempt, a file given up on loses its unlocked copy, a requeued one
# shows it was restarted.
INGESTION = FencedKind(
    name="ingestion",
    stale=_stale,
    lost=_lost,
    fail_error="Processing stopped {attempts} times without finishing (the worker crashed or "
    "ran out of time). Reprocess to try again.",
    requeue={"stage": Stage.QUEUED, "error": "Restarted: the previous run stopped responding."},
    enqueue=lambda attachment: enqueue_ingest(attachment.pk),
    on_fail=lambda attachment: unlocked_path(attachment).unlink(missing_ok=True),
)
