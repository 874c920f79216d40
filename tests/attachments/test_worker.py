"""A real django-q2 worker (`manage.py qcluster`) processing uploads, killed and restarted."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.utils import timezone

from attachments import services
from attachments.models import ChunkVector, NoteAttachment, VectorBuild
from attachments.services import vectors_next
from core.fencing import reap
from search.retrieval import Scope, search
from tests.factories import NotebookFactory, NoteFactory
from tests.fake_openai import fake_openai_server
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


def test_a_background_reembedding_runs_on_the_worker_while_search_keeps_its_vectors(
    alice, note, settings
):
    """`reembed --background` on a real worker: a search made while the worker is inside the
    build (its request to the new model's server held) answers from the live vectors as
    before; once complete, a start with the new settings switches (same size here, so the
    committed schema stays what every later test expects)."""

    def pages() -> list[int]:
        found = search(user=alice, query="Where do herons nest?", scope=Scope(note_id=note.pk),
                       limit=5, mode="vector")  # fmt: skip
        assert not found.degraded_reason
        return [h.chunk.page_number for h in found.hits if h.chunk]

    attachment = upload(alice, note, "text.pdf")
    with run_worker():
        wait_for(attachment, lambda a: a.status == "ready")
    before = pages()
    with fake_openai_server(dims=384) as server:
        call_command("reembed", "--background", "--to-backend", "openai",
                     "--to-model", "other-embed", "--to-base-url", server.url)  # fmt: skip
        server.hold = lambda payload: True  # the worker's first request waits for `release`
        with run_worker():
            wait_until(lambda: server.held, 60, message="the worker never asked the new model")
            assert pages() == before  # mid-build: the live vectors, the bundled model's query
            assert VectorBuild.objects.get().state == "building"
            server.release.set()
            wait_until(
                lambda: VectorBuild.objects.filter(state="complete").exists(),
                120,
                message=lambda: str(VectorBuild.objects.get()),
            )
        assert pages() == before
        settings.EMBEDDING_BACKEND, settings.EMBEDDING_MODEL = "openai", "other-embed"
        settings.EMBEDDING_BASE_URL = server.url
        assert vectors_next.at_start() == "Embedding: switched to the vectors of other-embed."
        asked = len(server.requests)
        assert pages()  # the new model's vectors, met by its query
        assert len(server.requests) > asked
    assert set(attachment.chunks.values_list("embedding_model", flat=True)) == {"other-embed"}
