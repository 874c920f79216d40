"""A real django-q2 worker (`manage.py qcluster`) processing uploads, killed and restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.conf import settings
from django.db import connection

from attachments import services
from attachments.models import NoteAttachment
from notebook.database import database_url
from tests.conftest import upload
from tests.factories import NotebookFactory, NoteFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
ROOT = settings.BASE_DIR


@contextmanager
def worker(**extra_env: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {
        **os.environ,
        **extra_env,
        "DATABASE_URL": database_url(connection.settings_dict),
        "MEDIA_ROOT": str(settings.MEDIA_ROOT),
        "WORKERS": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so we can kill all of it
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def wait_for(attachment: NoteAttachment, predicate, timeout: float = 180) -> NoteAttachment:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        attachment.refresh_from_db()
        if predicate(attachment):
            return attachment
        time.sleep(0.2)
    raise AssertionError(f"timed out; last state {attachment.status}/{attachment.stage}")


@pytest.fixture
def note(alice):
    return NoteFactory.create(notebook=NotebookFactory.create(owner=alice))


def test_worker_processes_an_upload_end_to_end(alice, note):
    attachment = upload(alice, note, "url.pdf")  # committed: enqueued on commit
    seen: set[str] = set()
    with worker():
        attachment = wait_for(
            attachment, lambda a: seen.add(f"{a.status}/{a.stage}") or a.status == "ready"
        )
    assert attachment.chunks.filter(embedding__isnull=False).count() == attachment.chunks.count()
    assert attachment.chunks.count() > 0
    assert "processing/extracting" in seen or "processing/embedding" in seen


def test_killed_worker_run_is_reaped_and_finishes_with_one_set_of_chunks(alice, note, settings):
    attachment = upload(alice, note, "R-data.pdf")
    # Small batches: several are committed before the kill, so the restart must cope with a
    # half-embedded set of chunks.
    with worker(EMBEDDING_BATCH_SIZE="4") as proc:
        wait_for(attachment, lambda a: a.stage == "embedding" and a.progress_current >= 16)
        os.killpg(proc.pid, signal.SIGKILL)  # mid-embedding: no chance to clean up
        proc.wait()
    attachment.refresh_from_db()
    assert attachment.status == "processing"
    first_run_chunks = attachment.chunks.count()
    assert first_run_chunks > 0

    settings.INGEST_STALE_SECONDS = 0  # the reaper's periodic run, without waiting for it
    time.sleep(0.1)
    assert services.attachment_reap_stuck() == 1
    attachment.refresh_from_db()
    assert attachment.status == "pending"

    with worker():
        attachment = wait_for(attachment, lambda a: a.status in ("ready", "failed"))
    assert attachment.status == "ready", attachment.error
    assert attachment.attempts == 2
    chunks = list(attachment.chunks.order_by("index").values_list("index", flat=True))
    assert chunks == list(range(first_run_chunks))  # exactly one set, no duplicates
    assert attachment.chunks.filter(embedding__isnull=True).count() == 0
