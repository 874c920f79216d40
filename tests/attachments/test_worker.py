"""A real django-q2 worker (`manage.py qcluster`) processing uploads, killed and restarted."""

from __future__ import annotations

import pytest
from django.utils import timezone

from attachments import services
from attachments.models import ChunkVector, NoteAttachment
from core.fencing import reap
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import upload
from tests.fixtures.processes import wait_for
from tests.fixtures.waiting import wait_until
from tests.workers import run_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def note(alice):
    return NoteFactory.create(notebook=NotebookFactory.create(owner=alice))


def test_worker_processes_an_upload_end_to_end(alice, note):
    attachment = upload(alice, note, "text.pdf")  # committed: enqueued on commit
    seen: list[str] = []

    def ready(a: NoteAttachment) -> bool:
        seen.append(f"{a.status}/{a.stage}")
        return a.status == "ready"

    with run_worker():
        attachment = wait_for(attachment, ready)
    assert not attachment.chunks.filter(vectors__isnull=True).exists()
    assert attachment.chunks.count() > 0
    assert "processing/extracting" in seen or "processing/embedding" in seen


def test_killed_worker_run_is_reaped_and_finishes_with_one_set_of_chunks(alice, note, settings):
    attachment = upload(alice, note, "long.pdf")  # 151 chunks: still embedding when killed
    # Small batches: several are committed before the kill, so the restart must cope with a
    # half-embedded set of chunks.
    with run_worker(EMBEDDING_BATCH_SIZE="4") as running:
        # Killed once a batch of vectors is committed (progress moves within a batch too).
        wait_for(
            attachment,
            lambda a: a.stage == "embedding" and a.chunks.filter(vectors__isnull=False).exists(),
        )
        running.kill()  # mid-embedding: no chance to clean up
    attachment.refresh_from_db()
    assert attachment.status == "processing"
    first_run_chunks = attachment.chunks.count()
    assert first_run_chunks > 0

    settings.INGEST_STALE_SECONDS = 0  # the reaper's periodic run, without waiting for it
    # ("stale" is a heartbeat older than now: the clock must have moved past the last one)
    wait_until(lambda: timezone.now() > attachment.heartbeat_at, 5)
    assert reap(services.INGESTION) == 1
    attachment.refresh_from_db()
    assert attachment.status == "pending"

    with run_worker():
        attachment = wait_for(attachment, lambda a: a.status in ("ready", "failed"))
    assert attachment.status == "ready", attachment.error
    assert attachment.attempts == 2
    chunks = list(attachment.chunks.order_by("index").values_list("index", flat=True))
    assert chunks == list(range(first_run_chunks))  # exactly one set, no duplicates
    assert not attachment.chunks.filter(vectors__isnull=True).exists()
    assert not attachment.chunks.exclude(embedding_model="all-MiniLM-L6-v2").exists()
    windows = ChunkVector.objects.filter(attachment=attachment).values_list("chunk", "window")
    assert len(set(windows)) == len(windows)  # each window once: no duplicates from run 1


def test_worker_processes_run_at_worker_nice():
    """Ingestion yields the CPU to the web: django-q2's worker processes (which run the tasks
    and start the extraction children) run at WORKER_NICE; the cluster's own process does not
    need to."""
    import psutil

    with run_worker(WORKER_NICE="7") as worker:
        cluster = psutil.Process(worker.proc.pid)

        def niced() -> list[psutil.Process]:
            worker.check_alive()
            return [p for p in cluster.children(recursive=True) if p.nice() == 7]

        wait_until(
            niced, 60, interval=0.2,
            message=lambda: str([(p.pid, p.name(), p.nice()) for p in cluster.children(True)]),
        )  # fmt: skip
        assert cluster.nice() == 0
