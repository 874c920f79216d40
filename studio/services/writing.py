"""Writing one Studio output in a django-q2 worker: claim (a conditional UPDATE on the token the
job was queued with), build (studio.services.building, in the language it was asked in), and
write only while the token still holds; a cancel, a regenerate or a delete bumps or removes it
and the run stops at its next heartbeat. Progress (percent and stage) is saved at each step."""

from __future__ import annotations

import contextlib
import logging

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
from studio.services import audio
from studio.services.building import BUILDERS, Material
from studio.services.runs import Run, Superseded

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
    run = Run(output)
    try:
        found = material(output)
        if not found.files:
            run.end(status=Status.FAILED, error=NO_SOURCES, progress=0, stage="")
            return
        with translation.override(output.language or settings.LANGUAGE_CODE):
            build = (
                audio.script if output.kind == StudioOutput.Kind.AUDIO else BUILDERS[output.kind]
            )
            written = build(found, run.beat)
        if not any(section["items"] for section in written["sections"]):
            run.end(status=Status.FAILED, error=EMPTY, progress=0, stage="")
            return
        title = output.title or _default_title(output, found.title)
        model = str(settings.CHAT_MODEL) if "llm" in found.answered_by else ""
        if output.kind == StudioOutput.Kind.AUDIO:  # its speech comes next, in slices
            run.save(content=written, title=title, model=model, stage="speech", progress=35)
            output.content = written
            with translation.override(output.language or settings.LANGUAGE_CODE):
                audio.guarded(output, run, lambda: audio.speak(output, run))
            return
        run.end(
            status=Status.READY, content=written, progress=100, stage="", error="", title=title,
            generator=StudioOutput.Generator.LLM if model else StudioOutput.Generator.OFFLINE,
            ready_at=timezone.now(), model=model,
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
