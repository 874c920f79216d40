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
from itertools import zip_longest
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import F, Q
from django.utils import timezone
from django_q.exceptions import TimeoutException

from attachments.models import NoteAttachment
from core import model_budget
from core.embeddings import EmbeddingError
from guides.models import Guide
from guides.services import content
from guides.services.model import as_question, model_guide
from guides.services.phrases import MAX_TOPICS, key_phrases
from guides.services.scheduling import (
    enqueue_guide,
    notebook_fingerprint,
    notebook_sources,
    source_fingerprint,
)
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
        run.end(status=Status.READY, ready_at=timezone.now(), **build(run, guide))
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


def build(run: _Run, guide: Guide) -> dict[str, Any]:
    """A guide to one PDF, or to every ready PDF of a notebook (outline: each file's first two
    levels; an empty guide while it has none). Summary, topics and questions are the model's
    (verified) when it answers, else offline: a source's own introduction, else its central
    sentences; for a notebook, a sentence per source, the opening of its introduction or its
    most central one (guides.services.content). `error` says when the owner's model-call budget kept
    the model out."""
    source = guide.attachment
    if source is not None:
        wanted, files = source_fingerprint(source), [source]
        scope, owner = Scope(attachment_ids=[source.pk]), source.note.notebook.owner
        entries = content.outline(files)
        title, k = content.title_of(source, entries), content.CENTRAL_PASSAGES
    else:
        notebook = guide.notebook
        wanted = notebook_fingerprint(notebook_id=notebook.pk)
        files = list(notebook_sources(notebook_id=notebook.pk))
        scope, owner = Scope(notebook_id=notebook.pk, include_notes=False), notebook.owner
        limit = max(8, content.MAX_OUTLINE // max(1, len(files)))
        entries = content.outline(files, levels=2, limit=limit)
        title, k = notebook.title, max(10, 2 * len(files))
    sources = [{"attachment_id": a.pk, "file": a.original_name} for a in files]
    out: dict[str, Any] = {"title": title, "outline": entries, "sources": sources,
                           "built_from": wanted, "generator": Guide.Generator.OFFLINE,
                           "model": "", "error": ""}  # fmt: skip
    if not files:
        return {**out, "summary": [], "topics": [], "questions": []}
    passages, pool, found = content.central_passages([a.pk for a in files], k=k)
    run.beat("passages")
    written = None
    if settings.CHAT_MODEL and passages:
        if model_budget.spend(user_id=owner.pk, feature="guide"):
            written = model_guide(title, entries, passages)
        else:
            out["error"] = BUDGET_SPENT
    run.beat("model")
    phrases = key_phrases([p.text for p in pool], found.centre, exclude=[title]) if found else []
    asked: list[content.Question] = []
    if written is not None:
        asked += [content.model_question(as_question(q)) for q in written.questions]
        out.update(summary=written.summary, topics=written.topics,
                   generator=Guide.Generator.LLM, model=settings.CHAT_MODEL)  # fmt: skip
    else:
        count = content.sentence_count(sum(a.chunk_count for a in files))
        if source is not None:
            lead = content.lead(source, found, count)
            said = [(s, True) for s in lead] or [
                (s, False) for s in content.central_sentences(passages, count)
            ]
        else:
            said = content.notebook_summary(files, passages)
        out.update(summary=[content.quoted(s, lead=lead) for s, lead in said], topics=[])
    run.beat("central")
    if len(out["topics"]) < 3:
        out["topics"] = list(dict.fromkeys([*out["topics"], *phrases]))[:MAX_TOPICS]
    sections = content.section_questions(entries, title, found)
    defined = [content.Question("definition", phrase) for phrase in phrases]
    asked += [q for pair in zip_longest(sections, defined) for q in pair if q is not None]
    out["questions"] = content.verified_questions(owner, asked, scope)
    run.beat("questions")
    return out
