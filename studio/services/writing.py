"""Writing one Studio output in a django-q2 worker: claim (a conditional UPDATE on the token the
job was queued with), build (studio.services.building, in the language it was asked in), and
write only while the token still holds; a cancel, a regenerate or a delete bumps or removes it
and the run stops at its next heartbeat. Progress (percent and stage) is saved at each step."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import F
from django.utils import timezone, translation
from django.utils.translation import gettext_noop
from django_q.exceptions import TimeoutException

from attachments.models import NoteAttachment
from core.embeddings import EmbeddingError
from notes.models import Note
from studio.models import StudioOutput
from studio.services.building import BUILDERS, Material

logger = logging.getLogger(__name__)
Status = StudioOutput.Status
# Errors are stored in English and shown translated (studio.views).
NO_SOURCES = gettext_noop(
    "None of the chosen sources is ready to be read: add a source or wait until it is read."
)
EMPTY = gettext_noop("The sources hold nothing this output could be made of.")
EMBEDDER = gettext_noop("The embedding model could not be reached; try again later.")
TOO_LONG = gettext_noop("Writing this output took too long and was stopped.")
FAILED = gettext_noop("Writing this output failed unexpectedly. The server log has details.")


class Superseded(Exception):
    """The output was cancelled, asked for again or deleted: this run must stop writing."""


class _Run:
    def __init__(self, output: StudioOutput) -> None:
        self.output = output
        self.token = output.token
        self.timings: dict[str, float] = {}
        self._started = time.monotonic()
        self._last = 0.0

    def _rows(self) -> Any:
        return StudioOutput.objects.filter(
            pk=self.output.pk, token=self.token, status=Status.PROCESSING
        )

    def beat(self, stage: str, percent: int) -> None:
        """Say the run is alive and how far it got; stop if it no longer owns the row."""
        now = time.monotonic()
        self.timings[stage] = round(now - self._started, 3)
        fields: dict[str, Any] = {"heartbeat_at": timezone.now()}
        if now - self._last >= 0.5 or percent >= 90:  # progress at most twice a second
            fields.update(progress=max(0, min(99, percent)), stage=stage[:40])
            self._last = now
        if not self._rows().update(**fields):
            raise Superseded

    def end(self, **fields: Any) -> None:
        self.timings["total"] = round(time.monotonic() - self._started, 3)
        if not self._rows().update(timings=self.timings, heartbeat_at=timezone.now(), **fields):
            raise Superseded


def material(output: StudioOutput) -> Material:
    """The ready documents and live notes the output is written from (its scope, read now)."""
    files = NoteAttachment.objects.filter(
        note__notebook_id=output.notebook_id,
        note__trashed_at__isnull=True,
        status=NoteAttachment.Status.READY,
    ).select_related("note")
    notes = Note.objects.filter(notebook_id=output.notebook_id, trashed_at__isnull=True)
    refs = [str(r) for r in output.scope or []]
    if refs:
        wanted = {int(r.split(":")[1]) for r in refs if r.startswith("attachment:")}
        files = files.filter(pk__in=wanted)
        notes = notes.filter(pk__in={int(r.split(":")[1]) for r in refs if r.startswith("note:")})
    owner = output.created_by or output.notebook.owner
    return Material(
        user=owner,
        notebook=output.notebook,
        files=list(files.order_by("created_at", "pk")),
        note_ids=list(notes.values_list("pk", flat=True)),
        scoped=bool(refs),
    )


def output_write(*, output_id: int, token: int) -> None:
    """Claim the output for `token` (PENDING → PROCESSING) and write it. Idempotent: a re-run
    writes the same fields again."""
    claimed = StudioOutput.objects.filter(pk=output_id, token=token, status=Status.PENDING).update(
        status=Status.PROCESSING, attempts=F("attempts") + 1, heartbeat_at=timezone.now()
    )
    if not claimed:
        logger.info("studio output %s run %s: taken, cancelled or superseded", output_id, token)
        return
    output = StudioOutput.objects.select_related("notebook__owner", "created_by").get(pk=output_id)
    run = _Run(output)
    try:
        found = material(output)
        if not found.files:
            run.end(status=Status.FAILED, error=NO_SOURCES, progress=0, stage="")
            return
        with translation.override(output.language or settings.LANGUAGE_CODE):
            written = BUILDERS[output.kind](found, run.beat)
        if not any(section["items"] for section in written["sections"]):
            run.end(status=Status.FAILED, error=EMPTY, progress=0, stage="")
            return
        title = output.title or _default_title(output, found.title)
        run.end(
            status=Status.READY, content=written, progress=100, stage="", error="", title=title,
            generator=StudioOutput.Generator.OFFLINE, ready_at=timezone.now(),
            model=str(settings.CHAT_MODEL) if "llm" in found.answered_by else "",
        )  # fmt: skip
    except Superseded:
        logger.info("studio output %s run %s was superseded; stopping", output_id, token)
    except EmbeddingError:
        with contextlib.suppress(Superseded):
            run.end(status=Status.FAILED, error=EMBEDDER)
    except TimeoutException:
        logger.error("studio output %s ran out of time", output_id)
        connection.close()
        with contextlib.suppress(Superseded, DatabaseError):
            run.end(status=Status.FAILED, error=TOO_LONG)
        raise
    except Exception:
        logger.exception("studio output %s failed", output_id)
        with contextlib.suppress(Superseded):
            run.end(status=Status.FAILED, error=FAILED)
        raise


def _default_title(output: StudioOutput, about: str) -> str:
    with translation.override(output.language or settings.LANGUAGE_CODE):
        kind = str(StudioOutput.Kind(output.kind).label)
        return f"{kind}: {about}"[:200]
