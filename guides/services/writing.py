"""Writing one guide in a django-q2 worker: claim (conditional UPDATE on the token the task was
queued with), build (with the chat model when one is configured, the notebook owner's
model-call budget has room and the model answers, else offline), write only while the token
still holds. Transient embedding failures are retried with backoff, at most
INGEST_MAX_ATTEMPTS runs; anything else ends `failed` with a reason."""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import F, Q
from django.utils import timezone
from django_q.exceptions import TimeoutException

from attachments.models import NoteAttachment
from guides.models import Guide
from guides.services import content
from guides.services.model import as_question, model_guide
from guides.services.scheduling import (
    enqueue_guide,
    notebook_fingerprint,
    notebook_sources,
    source_fingerprint,
)
from notebook import model_budget
from notebook.embeddings import EmbeddingError
from search.retrieval import Scope

logger = logging.getLogger(__name__)
Status = Guide.Status
RETRY_BACKOFF = (30, 120, 600)  # seconds, as ingestion's
# A ready guide's `error` when the budget kept the model out (shown beside how it was written).
BUDGET_SPENT = "The chat model was not asked: the notebook owner had used up their model calls."


class Superseded(Exception):
    """The guide was asked for again (new token) or deleted: this run must stop writing."""


class _Run:
    def __init__(self, guide: Guide) -> None:
        self.guide = guide
        self.token = guide.token
        self.timings: dict[str, float] = {}
        self._started = time.monotonic()

    def _rows(self) -> Any:
        return Guide.objects.filter(pk=self.guide.pk, token=self.token, status=Status.PROCESSING)

    def beat(self, stage: str) -> None:
        """Say the run is alive (the reaper leaves it alone) and check it still owns the row."""
        self.timings[stage] = round(time.monotonic() - self._started, 3)
        if not self._rows().update(heartbeat_at=timezone.now()):
            raise Superseded

    def end(self, **fields: Any) -> None:
        self.timings["total"] = round(time.monotonic() - self._started, 3)
        if not self._rows().update(timings=self.timings, heartbeat_at=timezone.now(), **fields):
            raise Superseded


def guide_write(*, guide_id: int, token: int) -> None:
    """Claim the guide for `token` (PENDING → PROCESSING, only if still that token and due)
    and write it. A source guide waits while its PDF is not ready (its hook queues it again).
    Idempotent: a re-run rewrites the same fields."""
    guides = Guide.objects.select_related("notebook__owner", "attachment__note")
    guide = guides.filter(pk=guide_id).first()
    if guide is None:
        logger.info("guide %s is gone", guide_id)
        return
    if guide.attachment and guide.attachment.status != NoteAttachment.Status.READY:
        logger.info("guide %s waits for attachment %s", guide_id, guide.attachment_id)
        return
    now = timezone.now()
    claimed = (
        Guide.objects.filter(pk=guide_id, token=token, status=Status.PENDING)
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
        .update(
            status=Status.PROCESSING, attempts=F("attempts") + 1, heartbeat_at=now, not_before=None
        )
    )
    if not claimed:
        logger.info("guide %s run %s: taken, superseded or not due", guide_id, token)
        return
    guide.refresh_from_db()
    run = _Run(guide)
    try:
        if guide.attachment is not None:
            fields = build_source(run, guide.attachment)
        else:
            fields = build_notebook(run, guide)
        run.end(status=Status.READY, ready_at=timezone.now(), **{"error": "", **fields})
    except Superseded:
        logger.info("guide %s run %s was superseded; stopping", guide_id, token)
    except EmbeddingError as exc:
        if exc.transient and guide.attempts < settings.INGEST_MAX_ATTEMPTS:
            _retry_later(run, str(exc))
        else:
            with contextlib.suppress(Superseded):
                run.end(status=Status.FAILED, error=f"The guide could not be written: {exc}")
    except TimeoutException:
        logger.error("guide %s ran out of time", guide_id)
        connection.close()
        with contextlib.suppress(Superseded, DatabaseError):
            run.end(status=Status.FAILED, error="Writing the guide took too long and was stopped.")
        raise
    except Exception as exc:
        logger.exception("guide %s failed", guide_id)
        with contextlib.suppress(Superseded):
            run.end(
                status=Status.FAILED,
                error=f"Writing the guide failed unexpectedly ({type(exc).__name__}). "
                "The server log has details.",
            )
        raise


def _retry_later(run: _Run, reason: str) -> None:
    delay = RETRY_BACKOFF[min(run.guide.attempts, len(RETRY_BACKOFF)) - 1]
    due = timezone.now() + timedelta(seconds=delay)
    with contextlib.suppress(Superseded):
        run.end(
            status=Status.PENDING, error=f"Will retry in {delay} s: {reason}"[:1000], not_before=due
        )
        enqueue_guide(run.guide.pk, run.token, due)


def _common(
    run: _Run,
    title: str,
    entries: list[dict[str, Any]],
    chosen: list[content.Passage],
    chunk_total: int,
    scope: Scope,
    user: Any,
) -> dict[str, Any]:
    """Summary, topics and questions: the model's (verified) when it answers, else offline;
    `error` says when the owner's model-call budget kept the model out."""
    written, note = None, ""
    if settings.CHAT_MODEL and chosen:
        if model_budget.spend(user_id=user.pk, feature="guide"):
            written = model_guide(title, entries, chosen)
        else:
            note = BUDGET_SPENT
    run.beat("model")
    candidates: list[content.Question] = []
    if written is not None:
        candidates += [content.model_question(as_question(q)) for q in written.questions]
        summary, topics = written.summary, written.topics
        generator, model = Guide.Generator.LLM, settings.CHAT_MODEL
        sentences: list[content.Sentence] = []
    else:
        sentences = content.central_sentences(chosen, content.sentence_count(chunk_total))
        run.beat("central")
        summary = [content.quoted(s) for s in sentences]
        topics = []
        generator, model = Guide.Generator.OFFLINE, ""
    if len(topics) < 3:
        topics = list(dict.fromkeys([*topics, *content.topics(entries, chosen, title)]))[:6]
    candidates += content.definition_questions(sentences)
    candidates += content.heading_questions(entries, title)
    questions = content.verified_questions(user, candidates, scope)
    run.beat("questions")
    return {
        "summary": summary,
        "topics": topics,
        "questions": questions,
        "generator": generator,
        "model": model,
        "error": note,
    }


def build_source(run: _Run, attachment: NoteAttachment) -> dict[str, Any]:
    """A guide to one PDF (see guides.services.content)."""
    wanted = source_fingerprint(attachment)
    entries = content.outline([attachment])
    title = content.title_of(attachment, entries)
    chosen = content.central_passages([attachment.pk])
    run.beat("passages")
    scope = Scope(attachment_ids=[attachment.pk])
    user = attachment.note.notebook.owner
    fields = _common(run, title, entries, chosen, attachment.chunk_count, scope, user)
    sources = [{"attachment_id": attachment.pk, "file": attachment.original_name}]
    return {**fields, "title": title, "outline": entries, "sources": sources, "built_from": wanted}


def build_notebook(run: _Run, guide: Guide) -> dict[str, Any]:
    """The same over every ready PDF of the notebook (outline: each file's first two
    levels); an empty guide while it has none."""
    notebook = guide.notebook
    wanted = notebook_fingerprint(notebook_id=notebook.pk)
    attachments = list(notebook_sources(notebook_id=notebook.pk))
    sources = [{"attachment_id": a.pk, "file": a.original_name} for a in attachments]
    base = {"title": notebook.title, "sources": sources, "built_from": wanted}
    if not attachments:
        return {
            **base,
            "summary": [],
            "topics": [],
            "outline": [],
            "questions": [],
            "generator": Guide.Generator.OFFLINE,
            "model": "",
        }
    per_file = max(8, content.MAX_OUTLINE // len(attachments))
    entries = content.outline(attachments, levels=2, limit=per_file)
    chosen = content.central_passages([a.pk for a in attachments], k=max(10, 2 * len(attachments)))
    run.beat("passages")
    scope = Scope(notebook_id=notebook.pk, include_notes=False)
    total = sum(a.chunk_count for a in attachments)
    fields = _common(run, notebook.title, entries, chosen, total, scope, notebook.owner)
    return {**base, **fields, "outline": entries}
