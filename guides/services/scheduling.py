"""When guides are (re)written: requests from ingestion's hooks and from reads, the debounce of
notebook guides, queueing (fenced by the guide's token), and what the reaper (core.fencing)
does with guides.

A request compares a fingerprint of the sources the guide should be written from (`wanted`)
with the one it has. Same and ready or on its way: nothing to do. Otherwise the guide's token
is bumped (a run still holding the old token cannot write any more) and a task is queued
with the new token. Notebook guides wait GUIDE_NOTEBOOK_DELAY seconds first, and a request
that finds such a delayed run not started yet only updates `wanted`: the run reads the sources
when it starts, so a burst of uploads becomes one refresh."""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from attachments.models import NoteAttachment
from core.fencing import FencedKind, queue_safely
from core.jobs import job_submit
from guides import selectors
from guides.models import Guide
from guides.selectors import NotebookGuide, SourceGuide
from notes.models import Notebook

if TYPE_CHECKING:
    from core.types import User

logger = logging.getLogger(__name__)
Status = Guide.Status
TASK = "guides.tasks.write_guide"


def notebook_sources(*, notebook_id: int) -> QuerySet[NoteAttachment]:
    """The PDFs a notebook guide is written from: ready, on notes not in the trash."""
    return (
        NoteAttachment.objects.filter(
            note__notebook_id=notebook_id,
            note__trashed_at__isnull=True,
            status=NoteAttachment.Status.READY,
        )
        .select_related("note")
        .order_by("created_at", "pk")
    )


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def _stamp(moment: datetime | None) -> str:
    return moment.isoformat() if moment else "-"


def source_fingerprint(attachment: NoteAttachment) -> str:
    """Changes whenever the attachment is (re)processed."""
    return _digest([str(attachment.pk), attachment.status, _stamp(attachment.ready_at)])


def notebook_fingerprint(*, notebook_id: int) -> str:
    """Changes whenever a source of the notebook becomes ready, is reprocessed or leaves."""
    rows = notebook_sources(notebook_id=notebook_id).values_list("pk", "ready_at")
    return _digest([f"{pk}:{_stamp(ready)}" for pk, ready in sorted(rows)])


def enqueue_guide(guide_id: int, token: int, due: datetime | None = None) -> None:
    """Queue one run for this token, now or at `due`, as the notebook owner's job
    (core.jobs: fair per user). A failed run has marked its guide already, so the queue
    never runs it again (one attempt); retries are ours."""
    owner_id = (
        Guide.objects.filter(pk=guide_id).values_list("notebook__owner_id", flat=True).first()
    )
    job_submit(TASK, guide_id, token, user_id=owner_id, group="guides", not_before=due)


def _request(guide: Guide, *, wanted: str, delay: int) -> bool:
    """On a locked row: decide and queue (on commit). True when a run was queued."""
    now = timezone.now()
    if guide.wanted == wanted and (guide.is_active or guide.status == Status.READY):
        return False
    if guide.status == Status.PENDING and guide.not_before and guide.not_before > now:
        # A delayed run is queued and has not started: it reads the sources when it does.
        Guide.objects.filter(pk=guide.pk).update(wanted=wanted)
        return False
    due = now + timedelta(seconds=delay) if delay else None
    Guide.objects.filter(pk=guide.pk).update(
        token=F("token") + 1,
        status=Status.PENDING,
        attempts=0,
        wanted=wanted,
        error="",
        requested_at=now,
        not_before=due,
        heartbeat_at=None,
    )
    guide.refresh_from_db(fields=["token"])
    pk, token = guide.pk, guide.token
    # Queueing must never fail what asked for it (an upload, a delete): the reaper retries.
    transaction.on_commit(lambda: queue_safely(enqueue_guide, pk, token, due, what="a guide run"))
    return True


def guide_request_source(*, attachment: NoteAttachment) -> Guide:
    """Ask for this attachment's guide to match its current state (idempotent; a run is
    queued only when the guide is missing, failed or written from an earlier processing)."""
    with transaction.atomic():
        guide, _ = Guide.objects.select_for_update().get_or_create(
            attachment=attachment,
            defaults={"kind": Guide.Kind.SOURCE, "notebook_id": attachment.note.notebook_id},
        )
        _request(guide, wanted=source_fingerprint(attachment), delay=0)
    guide.refresh_from_db()
    return guide


def guide_request_notebook(*, notebook_id: int, delay: int | None = None) -> Guide:
    """Ask for the notebook's guide to match its current sources, after GUIDE_NOTEBOOK_DELAY
    (debounced: see the module docstring)."""
    wait = settings.GUIDE_NOTEBOOK_DELAY if delay is None else delay
    with transaction.atomic():
        guide, _ = Guide.objects.select_for_update().get_or_create(
            kind=Guide.Kind.NOTEBOOK, notebook_id=notebook_id, attachment=None
        )
        _request(guide, wanted=notebook_fingerprint(notebook_id=notebook_id), delay=wait)
    guide.refresh_from_db()
    return guide


# --- Hooks: one call each from attachments' services. None of them may fail their caller.


def guides_after_ready(*, attachment_id: int) -> None:
    """An attachment became ready: write its guide, refresh its notebook's."""
    try:
        attachment = NoteAttachment.objects.select_related("note").get(pk=attachment_id)
        guide_request_source(attachment=attachment)
        guide_request_notebook(notebook_id=attachment.note.notebook_id)
    except Exception:
        logger.exception("could not request the guides of attachment %s", attachment_id)


def guides_after_reprocess(*, attachment: NoteAttachment) -> None:
    """An attachment is queued again: its guide waits for the new run (a run writing the old
    one is fenced off), and the notebook guide leaves it out until it is ready again."""
    try:
        with transaction.atomic():
            Guide.objects.filter(attachment=attachment).exclude(
                status=Status.PENDING, not_before__isnull=True
            ).update(token=F("token") + 1, status=Status.PENDING, not_before=None, error="")
        guide_request_notebook(notebook_id=attachment.note.notebook_id)
    except Exception:
        logger.exception("could not mark the guide of attachment %s stale", attachment.pk)


def guides_after_delete(*, notebook_id: int) -> None:
    """A source left the notebook: refresh the notebook guide (the source's own guide went
    with it)."""
    try:
        if Notebook.objects.filter(pk=notebook_id).exists():
            guide_request_notebook(notebook_id=notebook_id)
    except Exception:
        logger.exception("could not refresh the guide of notebook %s", notebook_id)


# --- The reaper's view of guides (core.fencing; registered in GuidesConfig.ready())


def _stale(cutoff: datetime) -> QuerySet[Guide]:
    return Guide.objects.filter(status=Status.PROCESSING, heartbeat_at__lt=cutoff)


def _lost(cutoff: datetime) -> QuerySet[Guide]:
    """Pending guides whose task was lost (a delayed one only once its `not_before` is past
    the cutoff too)."""
    return (
        Guide.objects.filter(status=Status.PENDING)
        .filter(Q(not_before__isnull=True) | Q(not_before__lt=cutoff))
        .filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, requested_at__lt=cutoff))
        # A source guide waits for its PDF to be ready: its hook queues it then.
        .filter(Q(kind=Guide.Kind.NOTEBOOK) | Q(attachment__status=NoteAttachment.Status.READY))
    )


GUIDES = FencedKind(
    name="guides",
    stale=_stale,
    lost=_lost,
    fail_error="Writing the guide stopped {attempts} times without finishing.",
    requeue={"not_before": None},
    enqueue=lambda guide: queue_safely(
        enqueue_guide, guide.pk, guide.token, None, what="a guide run"
    ),
    token_fenced=True,
)


def source_guide_ensure(*, user: User, attachment_id: int) -> SourceGuide:
    """The guide of one visible attachment, asked for when a ready PDF's guide is missing or
    was written from an earlier processing (files ingested before guides existed, a lost
    request)."""
    found = selectors.source_guide_get(user=user, attachment_id=attachment_id)
    if found.attachment.status == NoteAttachment.Status.READY:
        found.guide = guide_request_source(attachment=found.attachment)
    return found


def notebook_guide_ensure(*, user: User, notebook_id: int) -> NotebookGuide:
    """The guide of one visible notebook, asked for again when its sources changed since it
    was written (notes trashed or restored, anything a hook missed)."""
    found = selectors.notebook_guide_get(user=user, notebook_id=notebook_id)
    found.guide = guide_request_notebook(notebook_id=found.notebook.pk)
    return found
