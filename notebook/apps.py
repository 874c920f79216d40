from __future__ import annotations

import logging
import os
from typing import Any

from django.apps import AppConfig
from django.conf import settings

logger = logging.getLogger(__name__)


def lower_worker_priority(sender: Any = None, **kwargs: Any) -> None:
    """Run this (django-q2 worker) process at WORKER_NICE, never raising its priority.

    Ingestion is CPU-bound (pdfminer, OCR, the embedding model) and on a small machine shares
    the cores with the web processes; at nice 10 the kernel gives the web about nine times
    the CPU of a worker when both want it, so a page or an answer does not wait behind a
    batch of uploads, and the workers still get every cycle the web leaves idle. The
    extraction and OCR children inherit it."""

    wanted = settings.WORKER_NICE
    try:
        current = os.getpriority(os.PRIO_PROCESS, 0)
        if wanted > current:
            os.setpriority(os.PRIO_PROCESS, 0, wanted)
    except OSError:  # not allowed or not supported here: run as started
        logger.warning("could not set the worker's nice level to %s", wanted)


class NotebookConfig(AppConfig):
    """The project package as an app: template tags, the `serve` command, the pgvector migration."""

    name = "notebook"
    verbose_name = "Notebook"

    def ready(self) -> None:
        from django_q.signals import post_spawn

        post_spawn.connect(lower_worker_priority, dispatch_uid="notebook.worker_nice")
