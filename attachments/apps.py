from __future__ import annotations

import logging
import threading
from typing import Any

from django.apps import AppConfig

logger = logging.getLogger(__name__)


def warm_worker(sender: Any = None, **kwargs: Any) -> threading.Thread:
    """In a new worker process (django-q2's post_spawn), load in the background what the
    first pass of the first upload needs besides PDFium: the language identifier
    (py3langid's model, ~0.5 s to load on a small machine), so the first file after a start
    is searchable by keywords as quickly as the next. Never raises."""

    def load() -> None:
        try:
            # not at import: loading the identifier's model (~0.5 s) is what this warm-up is for
            from core.language import detect_language

            detect_language("The language identifier is loaded before the first upload.")
        except Exception:
            logger.warning("could not load the language identifier ahead", exc_info=True)

    thread = threading.Thread(target=load, name="warm-worker", daemon=True)
    thread.start()
    return thread


class AttachmentsConfig(AppConfig):
    name = "attachments"

    def ready(self) -> None:
        from django.db.models.signals import post_delete
        from django_q.signals import post_spawn

        # the formats register themselves with attachments.formats.registry on import
        import attachments.formats.builtin  # noqa: F401
        from attachments import signals
        from attachments.models import NoteAttachment
        from attachments.selectors import uploaded_bytes
        from attachments.services import vectors_next
        from attachments.services.files import remove_files_when_deleted
        from attachments.services.scheduling import INGESTION
        from core import fencing
        from core.quota import register_usage

        register_usage("attachments", uploaded_bytes)
        fencing.register(INGESTION)  # reaped by core.jobs.job_reap

        post_delete.connect(
            remove_files_when_deleted, sender=NoteAttachment, dispatch_uid="attachment_files"
        )
        post_spawn.connect(warm_worker, dispatch_uid="attachments.warm_worker")
        signals.source_ready.connect(
            vectors_next.on_source_ready, dispatch_uid="attachments.vectors_next_on_ready"
        )
