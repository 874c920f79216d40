"""A re-embedding with another model in the background (`manage.py reembed --background`,
attachments.services.vectors_next): search keeps the live vectors until the switch, what
changes meanwhile is caught, and the switch leaves the schema Django made."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from attachments.models import ChunkVector, DocumentChunk, VectorBuild
from attachments.services import vectors_next
from core.embeddings import embedder_for
from core.jobs import job_run_next
from core.models import Job
from intelligence.models import SourceProfile
from notes.indexing import note_embed
from notes.models import Note, NoteVector
from notes.services import note_create, note_update
from search.retrieval import Scope, search
from tests.factories import NotebookFactory, NoteFactory
from tests.fake_openai import fake_openai_server
from tests.fixtures.documents import ingest, upload

pytestmark = pytest.mark.django_db

QUESTION = "Where do herons nest along the millpond?"


@pytest.fixture
def note(alice):
    return NoteFactory.create(notebook=NotebookFactory.create(owner=alice))


@pytest.fixture
def library(alice, note):
    """A ready source with the bundled model's vectors and a note with its own."""
    source = ingest(upload(alice, note, "text.pdf"))
    written = note_create(
        notebook=note.notebook, author=alice, title="Field notes", body="Herons nest in alders."
    )
    note_embed(note_id=written.pk)
    return source, written


def run_jobs() -> None:
    """Run every queued job here, as a worker would take them (fairest first)."""
    for _ in range(100):
        if job_run_next() is None:
            return
    raise AssertionError("jobs kept coming")


def vector_pages(user, note) -> list[int]:
    found = search(user=user, query=QUESTION, scope=Scope(note_id=note.pk), limit=5, mode="vector")
    assert not found.degraded_reason
    return [h.chunk.page_number for h in found.hits if h.chunk]


def start(server_url: str, capture) -> VectorBuild:
    with capture(execute=True):
        call_command(
            "reembed", "--background", "--to-backend", "openai", "--to-model", "small-embed",
            "--to-dimensions", "16", "--to-base-url", server_url,
        )  # fmt: skip
    return VectorBuild.objects.get(is_open=True)


def dimensions(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attname = 'embedding'",
            [table],
        )
        return int(cursor.fetchone()[0])


def schema(table: str) -> tuple[list[str], list[str]]:
    """A table's index and constraint names with their definitions, the table's own name
    taken out (so that a swapped table compares equal to the one Django made)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, replace(indexdef, %s, 'T') FROM pg_indexes WHERE tablename = %s "
            "ORDER BY 1",
            [table, table],
        )
        indexes = [f"{n}: {d}" for n, d in cursor.fetchall()]
        cursor.execute(
            "SELECT conname, contype, pg_get_constraintdef(oid), convalidated FROM pg_constraint "
            "WHERE conrelid = %s::regclass ORDER BY 1",
            [table],
        )
        constraints = [" ".join(map(str, row)) for row in cursor.fetchall()]
    return indexes, constraints


def test_search_keeps_the_live_vectors_until_the_switch(
    alice, note, library, settings, monkeypatch, django_capture_on_commit_callbacks, capsys
):
    source, written = library
    before = vector_pages(alice, note)
    assert before  # the bundled model's vectors answer
    schemas = {t: schema(t) for t in ("attachments_chunkvector", "notes_notevector")}
    with fake_openai_server(dims=16) as server:
        build = start(server.url, django_capture_on_commit_callbacks)
        assert build.state == "building"
        assert {tuple(j.args) for j in Job.objects.filter(func=vectors_next.SOURCE_TASK)} == {
            (build.pk, source.pk)
        }
        run_jobs()
        build.refresh_from_db()
        assert build.state == "complete"  # every source and note has its vectors of the new model
        assert server.requests  # made by the new model's server
        # Nothing live changed: the bundled model's vectors, its name on every chunk, and
        # search's answers.
        assert dimensions("attachments_chunkvector") == 384
        assert dimensions("attachments_chunkvector_next") == 16
        assert set(DocumentChunk.objects.values_list("embedding_model", flat=True)) == {
            "all-MiniLM-L6-v2"
        }
        assert vector_pages(alice, note) == before
        call_command("reembed", "--switch")  # the settings still name the bundled model
        assert "Not switched" in capsys.readouterr().out
        assert dimensions("attachments_chunkvector") == 384

        # The restart with the new settings.
        settings.EMBEDDING_BACKEND, settings.EMBEDDING_MODEL = "openai", "small-embed"
        settings.EMBEDDING_DIMENSIONS, settings.EMBEDDING_BASE_URL = 16, server.url
        for model in (ChunkVector, NoteVector, SourceProfile):
            monkeypatch.setattr(model._meta.get_field("embedding"), "dimensions", 16)
        assert vectors_next.at_start() == "Embedding: switched to the vectors of small-embed."

        build.refresh_from_db()
        assert (build.state, build.is_open) == ("switched", False)
        assert dimensions("attachments_chunkvector") == 16
        assert dimensions("notes_notevector") == 16
        chunks = DocumentChunk.objects.filter(attachment=source)
        assert set(chunks.values_list("embedding_model", flat=True)) == {"small-embed"}
        assert ChunkVector.objects.filter(attachment=source).count() == chunks.count()
        assert all(len(v) == 16 for v in ChunkVector.objects.values_list("embedding", flat=True))
        assert Note.objects.get(pk=written.pk).embedding_model == "small-embed"
        assert NoteVector.objects.filter(note=written).count() == 1
        # The same names and definitions as Django's migrations made them; no table left over.
        for table, (indexes, constraints) in schemas.items():
            assert schema(table) == (
                [i.replace("vector(384)", "vector(16)") for i in indexes],
                constraints,
            )
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass('attachments_chunkvector_next')")
            assert cursor.fetchone()[0] is None
        # The profiles' document vectors follow (attachments.signals: intelligence).
        assert set(SourceProfile.objects.values_list("embedding_model", flat=True)) == {
            "small-embed"
        }
        # Questions are embedded by the new model and meet its vectors.
        asked = len(server.requests)
        assert vector_pages(alice, note)
        assert len(server.requests) > asked


def test_what_changes_during_the_build_is_caught(
    alice, note, library, settings, django_capture_on_commit_callbacks
):
    source, written = library
    with fake_openai_server(dims=16) as server:
        build = start(server.url, django_capture_on_commit_callbacks)
        run_jobs()
        assert vectors_next.advance(build_id=build.pk) == "complete"
        # A source made ready meanwhile is queued by its ready signal, and a note edited after
        # its new vectors were made no longer counts as done.
        with django_capture_on_commit_callbacks(execute=True):
            later = ingest(upload(alice, note, "other.pdf"))
        assert vectors_next.missing_sources() == [later.pk]
        assert Job.objects.filter(func=vectors_next.SOURCE_TASK, state="pending").count() == 1
        note_update(note=written, body="Herons nest in alders and willows.")
        assert vectors_next.missing_notes() == [written.pk]
        # A switch now finds them missing and goes back to building instead.
        settings.EMBEDDING_BACKEND, settings.EMBEDDING_MODEL = "openai", "small-embed"
        settings.EMBEDDING_DIMENSIONS, settings.EMBEDDING_BASE_URL = 16, server.url
        assert vectors_next.switch() == "building"
        assert dimensions("attachments_chunkvector") == 384
        # A deleted source takes its new vectors along (the next table's keys cascade).
        source.delete()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM attachments_chunkvector_next WHERE attachment_id = %s",
                [source.pk],
            )
            assert cursor.fetchone()[0] == 0
        settings.EMBEDDING_BACKEND, settings.EMBEDDING_MODEL = "local", ""
        settings.EMBEDDING_DIMENSIONS = 384
        run_jobs()
        build.refresh_from_db()
        assert build.state == "complete"
        assert not vectors_next.missing_sources()
        assert not vectors_next.missing_notes()


def test_cancel_refusals_and_status(
    alice, note, library, django_capture_on_commit_callbacks, capsys, monkeypatch
):
    call_command("reembed", "--status")
    assert "No re-embedding" in capsys.readouterr().out
    with pytest.raises(CommandError, match="configured embedding model already"):
        call_command("reembed", "--background", "--to-model", "")
    # Not probed here: the int8 model's first load exports it (a minute); the probe has its
    # own test below.
    monkeypatch.setattr(vectors_next, "_probe", lambda config: None)
    with django_capture_on_commit_callbacks(execute=False):  # nothing embedded here
        call_command("reembed", "--background", "--to-runtime", "onnx-int8")
    build = VectorBuild.objects.get(is_open=True)  # the bundled model on int8: another build
    assert (build.model_name, build.runtime, build.dimensions) == (
        "all-MiniLM-L6-v2",
        "onnx-int8",
        384,
    )
    call_command("reembed", "--cancel")
    capsys.readouterr()
    with fake_openai_server(dims=16) as server:
        start(server.url, django_capture_on_commit_callbacks)
        with pytest.raises(CommandError, match="open already"):
            start(server.url, django_capture_on_commit_callbacks)
        with pytest.raises(CommandError, match="in the background"):
            call_command("reembed", "--sync")  # the in-place re-embedding would clash
        call_command("reembed", "--status")
        out = capsys.readouterr().out
        assert "small-embed (16 dimensions): building" in out
        assert "sources: 0 of 1; notes: 0 of 2" in out  # the source's note and ours
        call_command("reembed", "--cancel")
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass('attachments_chunkvector_next')")
            assert cursor.fetchone()[0] is None
        assert VectorBuild.objects.filter(state="cancelled").count() == 2
        run_jobs()  # its queued jobs find it closed and write nothing
        assert dimensions("attachments_chunkvector") == 384


def test_chunks_replaced_while_embedded_are_embedded_again(
    alice, note, library, monkeypatch, django_capture_on_commit_callbacks
):
    source, _ = library
    with fake_openai_server(dims=16) as server:
        build = start(server.url, django_capture_on_commit_callbacks)
        embedder = embedder_for(vectors_next.target(build))
        calls = []

        def embed_while_rechunked(texts, **kwargs):
            calls.append(len(texts))
            if len(calls) == 1:  # a re-chunking commits while the first try embeds
                first = DocumentChunk.objects.filter(attachment=source).order_by("index")[0]
                first.delete()
                first.pk = None
                first.save()
            return type(embedder).embed(embedder, texts, **kwargs)

        monkeypatch.setattr(embedder, "embed", embed_while_rechunked)
        assert vectors_next.build_source(build_id=build.pk, attachment_id=source.pk)
    assert len(calls) == 2
    assert vectors_next.missing_sources() == []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(DISTINCT chunk_id) FROM attachments_chunkvector_next "
            "WHERE attachment_id = %s",
            [source.pk],
        )
        assert cursor.fetchone()[0] == DocumentChunk.objects.filter(attachment=source).count()


def test_an_unreachable_model_is_refused_and_failed_jobs_are_said_and_retried(
    alice, note, library, django_capture_on_commit_callbacks, capsys
):
    with fake_openai_server(dims=16) as server:
        server.always = 401
        with pytest.raises(CommandError, match="could not embed a test sentence"):
            start(server.url, django_capture_on_commit_callbacks)
        assert not VectorBuild.objects.exists()  # nothing opened, no table made
        server.always = None
        build = start(server.url, django_capture_on_commit_callbacks)
        # The server went away after the start: the jobs ran out of attempts.
        Job.objects.filter(func=vectors_next.SOURCE_TASK).update(
            state="failed", error="EmbeddingError('the key was refused')"
        )
        capsys.readouterr()
        call_command("reembed", "--status")
        out = capsys.readouterr().out
        assert "1 job(s) failed; the last: EmbeddingError('the key was refused')" in out
        call_command("reembed", "--retry")
        queued = Job.objects.filter(func=vectors_next.SOURCE_TASK, state="pending")
        assert [tuple(j.args) for j in queued] == [(build.pk, library[0].pk)]
        run_jobs()
        call_command("reembed", "--status")
        out = capsys.readouterr().out
        assert "complete" in out
        assert "failed" not in out
