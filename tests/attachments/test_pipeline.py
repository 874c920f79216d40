"""The ingestion pipeline on the samples (tests/samples/) and, marked `eval`, on every evaluation
PDF, called as the worker calls it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from attachments import services
from attachments.models import ChunkVector, DocumentChunk, NoteAttachment
from core.fencing import reap
from intelligence.models import SourceProfile
from notes.models import NoteVector
from tests.factories import NotebookFactory, NoteFactory
from tests.fake_openai import fake_openai_server
from tests.fixtures.documents import (
    SAMPLE_PASSWORD,
    assert_consistent,
    eval_pdf,
    ingest,
    upload,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def note(alice):
    return NoteFactory.create(notebook=NotebookFactory.create(owner=alice))


def keyword_hits(attachment: NoteAttachment, query: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT page_number FROM attachments_documentchunk WHERE attachment_id = %s AND "
            "search_vector @@ websearch_to_tsquery(%s::regconfig, %s) ORDER BY page_number",
            [attachment.pk, attachment.search_config, query],
        )
        return [row[0] for row in cursor.fetchall()]


# name → (pages, language, search config, OCR pages, a keyword query, a page it is on)
EVAL = {
    "R-data.pdf": (41, "en", "english", 0, "UTF-8-BOM", 14),
    "R-intro.pdf": (113, "en", "english", 0, "tapply ragged arrays", 23),
    "url.pdf": (6, "en", "english", 0, "urldef", 2),
    "natbib.pdf": (26, "en", "english", 0, "citep", None),
    # Page 6 is a printed score under one line of text: without pdfminer's "(cid:NN)" codes
    # of its glyphs that line is too short, so the page is OCR'd (and reads "Prélude BWV 1007").
    "lilypond-essay.de.pdf": (41, "de", "german", 1, "Notensatz", None),
    "lshort-zh-cn.pdf": (139, "zh", "simple", 0, "宏包", None),
    "R-data-scanned-p1-4.pdf": (4, "en", "english", 4, "Minitab SPSS Stata", 3),
}


# The same for the samples: text PDFs with headings (one a manual with lists and code), and a scan.
SAMPLES = {
    "text.pdf": (3, "en", "english", 0, "kingfisher weir", 2),
    "other.pdf": (2, "en", "english", 0, "sourdough", 1),
    "manual.pdf": (3, "en", "english", 0, "publish SFTP", 3),
    "scanned.pdf": (2, "en", "english", 2, "fishing boat", 2),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_sample_ingests(alice, note, name):
    assert_ingests(ingest(upload(alice, note, name)), *SAMPLES[name])


@pytest.mark.eval
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EVAL))
def test_every_eval_pdf_ingests(alice, note, name):
    assert_ingests(ingest(upload(alice, note, name, eval_pdf(name))), *EVAL[name])


def assert_ingests(
    attachment: NoteAttachment,
    pages: int,
    language: str,
    config: str,
    ocr: int,
    query: str,
    page: int | None,
) -> None:
    assert attachment.status == "ready", attachment.error
    assert (attachment.page_count, attachment.language, attachment.search_config) == (
        pages,
        language,
        config,
    )
    assert attachment.ocr_pages == ocr
    assert attachment.stage == "done"
    assert attachment.embedding_model == "all-MiniLM-L6-v2"
    stages = {"extract", "ocr", "chunk", "embed", "thumbnail"}
    # The first pass adds its own (a scan gets only the attempt: PDFium finds no text).
    assert stages | {"fast_text"} <= set(attachment.timings)
    assert set(attachment.timings) <= stages | {"fast_text", "fast_pass", "searchable"}
    assert_consistent(attachment)
    hits = keyword_hits(attachment, query)
    assert hits, f"no chunk matches {query!r}"
    if page:
        assert page in hits


def test_scanned_pages_are_ocrd_and_readable(alice, note):
    attachment = ingest(upload(alice, note, "scanned.pdf"))
    first = attachment.pages.get(number=1)
    assert first.is_ocr
    assert "Lighthouse Keeping Log" in first.text
    assert attachment.pages.filter(is_ocr=True).count() == 2


def test_truncated_pdf_fails_with_a_reason(alice, note):
    attachment = ingest(upload(alice, note, "broken.pdf"))
    assert attachment.status == "failed"
    assert "damaged or incomplete" in attachment.error
    assert not attachment.pages.exists()
    assert not attachment.chunks.exists()


def test_password_flow_locks_after_three_wrong_attempts(
    alice, note, django_capture_on_commit_callbacks
):
    attachment = upload(alice, note, "locked.pdf")
    for left in ("2 attempts left", "1 attempt left", "now locked"):
        with pytest.raises(ValidationError, match=left):
            services.attachment_submit_password(attachment=attachment, password="open sesame")
    attachment.refresh_from_db()
    assert attachment.is_locked
    with pytest.raises(ValidationError, match="Locked after 3 wrong passwords"):
        services.attachment_submit_password(attachment=attachment, password=SAMPLE_PASSWORD)
    services.attachment_unlock_reset(attachment=attachment)
    with django_capture_on_commit_callbacks(execute=True):
        attachment = services.attachment_submit_password(
            attachment=attachment, password=SAMPLE_PASSWORD
        )
    assert attachment.status == "pending"
    assert services.unlocked_path(attachment).exists()

    from django_q.models import OrmQ

    from core.models import Job

    (queued,) = Job.objects.filter(func="attachments.tasks.ingest_attachment")
    assert queued.args == [attachment.pk]  # the job carries the id, nothing else

    attachment = ingest(attachment)
    assert attachment.status == "ready"
    assert attachment.page_count == 3
    assert not services.unlocked_path(attachment).exists()  # the decrypted copy is gone
    stored = str([list(model.objects.values()) for model in (NoteAttachment, OrmQ, Job)])
    assert SAMPLE_PASSWORD not in stored
    assert keyword_hits(attachment, "kingfisher") == [2]


def test_reprocessing_replaces_pages_and_chunks(alice, note):
    attachment = ingest(upload(alice, note, "text.pdf"))
    first_ids = set(attachment.chunks.values_list("pk", flat=True))
    attachment = ingest(services.attachment_reprocess(attachment=attachment))
    assert attachment.status == "ready"
    assert attachment.attempts == 1
    assert not first_ids & set(attachment.chunks.values_list("pk", flat=True))
    assert_consistent(attachment)


def test_a_run_that_lost_its_claim_writes_nothing(alice, note):
    attachment = upload(alice, note, "text.pdf")
    NoteAttachment.objects.filter(pk=attachment.pk).update(status="processing", attempts=1)
    services.attachment_ingest(attachment_id=attachment.pk)  # not pending: must not run
    assert not attachment.chunks.exists()
    assert not attachment.pages.exists()


def test_delete_removes_rows_and_files(alice, note, django_capture_on_commit_callbacks):
    attachment = ingest(upload(alice, note, "text.pdf"))
    path = Path(attachment.file.path)
    with django_capture_on_commit_callbacks(execute=True):
        services.attachment_delete(attachment=attachment)
    assert not path.exists()
    assert not DocumentChunk.objects.exists()
    assert not NoteAttachment.objects.exists()


@pytest.mark.parametrize("whole", ["note", "notebook", "admin"])
def test_deleting_the_note_or_notebook_removes_the_files_too(
    whole, alice, note, django_capture_on_commit_callbacks
):
    """Files go with their rows however those are deleted: a note deleted forever, a
    notebook, or the admin's delete; a deletion rolled back keeps them."""
    from attachments.thumbnails import thumbnail_for, thumbnail_path
    from notes import services as note_services

    attachment = ingest(upload(alice, note, "text.pdf"))
    thumbnail_for(attachment)
    paths = [Path(attachment.file.path), thumbnail_path(attachment)]
    assert all(p.exists() for p in paths)

    def delete_then_fail() -> None:
        with transaction.atomic():
            note.notebook.delete()
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        delete_then_fail()
    assert all(p.exists() for p in paths)
    note = type(note).objects.select_related("notebook").get(pk=note.pk)  # pk kept in the DB

    with django_capture_on_commit_callbacks(execute=True):
        if whole == "note":
            note_services.note_trash(note=note)
            note.refresh_from_db()
            note_services.note_delete(note=note)
        elif whole == "notebook":
            note_services.notebook_delete(notebook=note.notebook)
        else:
            NoteAttachment.objects.all().delete()  # the admin's bulk delete
    assert not NoteAttachment.objects.exists()
    assert not any(p.exists() for p in paths)


def test_reaper_requeues_abandoned_runs_then_gives_up(alice, note, settings):
    attachment = upload(alice, note, "text.pdf")
    stale = timezone.now() - timedelta(seconds=settings.INGEST_STALE_SECONDS + 5)
    NoteAttachment.objects.filter(pk=attachment.pk).update(
        status="processing", attempts=1, heartbeat_at=stale
    )
    assert reap(services.INGESTION) == 1
    attachment.refresh_from_db()
    assert attachment.status == "pending"
    assert "Restarted" in attachment.error

    NoteAttachment.objects.filter(pk=attachment.pk).update(
        status="processing", attempts=settings.INGEST_MAX_ATTEMPTS, heartbeat_at=stale
    )
    reap(services.INGESTION)
    attachment.refresh_from_db()
    assert attachment.status == "failed"
    assert "stopped 3 times" in attachment.error


def test_reaper_leaves_healthy_runs_alone(alice, note):
    attachment = upload(alice, note, "text.pdf")
    NoteAttachment.objects.filter(pk=attachment.pk).update(
        status="processing", attempts=1, heartbeat_at=timezone.now()
    )
    assert reap(services.INGESTION) == 0


@pytest.fixture
def remote_embeddings(settings):
    with fake_openai_server(dims=384) as server:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_BASE_URL = server.url
        settings.EMBEDDING_API_KEY = "sk-test"
        settings.EMBEDDING_MODEL = "fake-embed"
        yield server


def test_remote_embeddings_survive_a_429(alice, note, remote_embeddings):
    remote_embeddings.script = [429, 429]
    attachment = ingest(upload(alice, note, "text.pdf"))
    assert attachment.status == "ready", attachment.error
    assert attachment.embedding_model == "fake-embed"
    assert remote_embeddings.requests[0]["auth"] == "Bearer sk-test"
    assert len(remote_embeddings.requests) >= 3


def test_remote_embeddings_down_means_retry_later_then_fail(
    alice, note, remote_embeddings, settings
):
    from core.models import Job

    remote_embeddings.always = 503
    attachment = ingest(upload(alice, note, "text.pdf"))
    assert attachment.status == "pending"
    assert attachment.error.startswith("Will retry in 30 s")
    (retry,) = Job.objects.filter(
        func="attachments.tasks.ingest_attachment", not_before__isnull=False
    )
    assert attachment.not_before == retry.not_before  # its ticket fires then (core.jobs)
    assert attachment.chunks.exists()  # keyword search works while embeddings wait
    assert ingest(attachment).attempts == 1  # any task before the retry is due leaves it be

    assert retry.not_before is not None
    NoteAttachment.objects.filter(pk=attachment.pk).update(
        attempts=settings.INGEST_MAX_ATTEMPTS - 1, not_before=retry.not_before - timedelta(hours=1)
    )  # the retry is due
    attachment = ingest(attachment)
    assert attachment.status == "failed"
    assert "503" in attachment.error


def test_remote_embeddings_refusing_the_key_fail_at_once(alice, note, remote_embeddings):
    remote_embeddings.always = 401
    attachment = ingest(upload(alice, note, "text.pdf"))
    assert attachment.status == "failed"
    assert "401" in attachment.error
    assert len(remote_embeddings.requests) == 1  # no retries for a permanent error


def test_reembed_command_resizes_vectors_for_a_new_model(alice, note, settings, monkeypatch):
    from django.core.management import CommandError, call_command

    from attachments.services.vectors_next import column_dimensions

    attachment = ingest(upload(alice, note, "text.pdf"))
    SourceProfile.objects.filter(attachment=attachment).update(
        canonical_text="Wildlife of the Millpond\nType: Other"
    )
    with fake_openai_server(dims=16) as server:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_BASE_URL = server.url
        settings.EMBEDDING_MODEL = "small-embed"
        settings.EMBEDDING_DIMENSIONS = 16
        # What a restart with the new setting does to the model field.
        for model in (ChunkVector, NoteVector, SourceProfile):
            monkeypatch.setattr(model._meta.get_field("embedding"), "dimensions", 16)
        with pytest.raises(CommandError, match="--yes"):
            call_command("reembed")
        assert column_dimensions() == 384
        call_command("reembed", "--yes", "--sync")
        assert column_dimensions() == 16
        attachment.refresh_from_db()
        assert attachment.status == "ready"
        assert attachment.embedding_model == "small-embed"
        chunks = list(attachment.chunks.all())
        assert all(c.embedding_model == "small-embed" for c in chunks)
        vectors = ChunkVector.objects.filter(attachment=attachment)
        assert vectors.count() == len(chunks)  # the server takes whole passages: one window
        assert all(len(v.embedding) == 16 for v in vectors)
        profile = SourceProfile.objects.get(attachment=attachment)  # the ready hook's
        assert profile.embedding_model == "small-embed"  # its canonical text, re-embedded
        assert len(profile.embedding) == 16
        call_command("reembed", "--sync")  # nothing left to do


def test_a_parser_over_its_time_limit_fails_the_attachment_not_the_worker(alice, note, settings):
    # No time at all: a warm standby child reads a one-page PDF in well under 0.1 s.
    settings.EXTRACT_TIMEOUT = 0
    attachment = ingest(upload(alice, note, "text.pdf"))
    assert attachment.status == "failed"
    assert "took longer than 0 seconds, so it was stopped" in attachment.error
    settings.EXTRACT_TIMEOUT = 300
    assert ingest(services.attachment_reprocess(attachment=attachment)).status == "ready"


def test_a_parser_over_its_memory_cap_fails_the_attachment(alice, note, settings):
    settings.EXTRACT_MEMORY_MB = 40  # less than the parser needs to start
    attachment = ingest(upload(alice, note, "text.pdf"))
    assert attachment.status == "failed"
    assert "more than 40 MB of memory" in attachment.error
