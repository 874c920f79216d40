"""Reuse by hash: the same PDF attached again by its owner is copied from the ready one, not
extracted and embedded again; each copy is searchable, citable and deletable on its own."""

from __future__ import annotations

import pytest
from django.db import connection

from attachments import services
from attachments.models import ChunkVector, DocumentChunk, DocumentPage, NoteAttachment
from attachments.services import ingestion
from attachments.services.reuse import copy_ingested, reusable_source
from guides.models import Guide
from notes.services import note_delete, note_trash
from search.retrieval import Hit, Scope, search
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import assert_consistent, sample, upload

pytestmark = pytest.mark.django_db

PDF = "text.pdf"  # 3 pages: quick to ingest for real
QUERY = "kingfisher"  # on its page 2


def ingest(attachment: NoteAttachment) -> NoteAttachment:
    services.attachment_ingest(attachment_id=attachment.pk)
    attachment.refresh_from_db()
    return attachment


def chunk_of(hit: Hit) -> DocumentChunk:
    """The passage a hit is (the hits here are all from PDFs)."""
    assert hit.chunk is not None
    return hit.chunk


def new_note(user, **kwargs):
    return NoteFactory.create(notebook=NotebookFactory.create(owner=user), author=user, **kwargs)


def _refuse_pipeline(monkeypatch) -> list[str]:
    """Extraction, OCR and embedding fail the test if called (the embedder of searches is
    another entry point: core.embeddings, untouched)."""
    calls: list[str] = []

    def refuse(name: str):
        def called(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} ran for a reused file")

        return called

    monkeypatch.setattr(ingestion, "extract_text", refuse("extract_text"))
    monkeypatch.setattr(ingestion, "ocr_pages", refuse("ocr_pages"))
    monkeypatch.setattr(ingestion, "get_embedder", refuse("get_embedder"))
    return calls


@pytest.fixture
def first(alice):
    """PDF ingested for real on a note of alice's."""
    attachment = ingest(upload(alice, new_note(alice, title="First"), PDF))
    assert attachment.status == "ready", attachment.error
    return attachment


def rows(attachment: NoteAttachment) -> dict[str, object]:
    """Everything ingestion wrote for `attachment`, with chunk ids replaced by chunk indexes."""
    index = dict(DocumentChunk.objects.filter(attachment=attachment).values_list("pk", "index"))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lexeme, df, chunk_ids, tfs, lens FROM attachments_postinglist "
            "WHERE attachment_id = %s ORDER BY lexeme",
            [attachment.pk],
        )
        postings = [
            (lexeme, df, [index[i] for i in ids], tfs, lens)
            for lexeme, df, ids, tfs, lens in cursor.fetchall()
        ]
    return {
        "pages": list(
            DocumentPage.objects.filter(attachment=attachment)
            .order_by("number")
            .values_list("number", "text", "is_ocr", "lines", "running")
        ),
        "chunks": list(
            DocumentChunk.objects.filter(attachment=attachment)
            .order_by("index")
            .values_list(
                "index",
                "page_number",
                "content",
                "heading_path",
                "start_char",
                "end_char",
                "token_len",
                "search_vector",
                "embedding_model",
            )
        ),
        "vectors": sorted(
            (index[chunk], window, list(embedding))
            for chunk, window, embedding in ChunkVector.objects.filter(
                attachment=attachment
            ).values_list("chunk_id", "window", "embedding")
        ),
        "postings": postings,
        "row": NoteAttachment.objects.filter(pk=attachment.pk)
        .values_list(
            "page_count",
            "ocr_pages",
            "language",
            "search_config",
            "embedding_model",
            "chunk_count",
            "token_total",
        )
        .get(),
    }


@pytest.mark.slow
def test_the_same_pdf_on_another_note_is_ready_without_extraction_or_embedding(alice, monkeypatch):
    first = ingest(upload(alice, new_note(alice, title="First"), "other.pdf"))
    assert first.status == "ready", first.error
    calls = _refuse_pipeline(monkeypatch)
    second_note = new_note(alice, title="Second")
    second = upload(alice, second_note, "other.pdf")
    assert second.status == "pending"
    second = ingest(second)
    assert calls == []
    assert second.status == "ready", second.error
    assert (second.stage, second.progress_percent) == ("done", 100)
    assert second.timings["reused_from"] == first.pk
    assert set(second.timings) == {"reuse", "reused_from"}
    assert second.ready_at is not None
    assert rows(second) == rows(first)
    assert_consistent(second)
    # Its own rows: no chunk, vector or posting of the second points at the first's chunks.
    ids = set(DocumentChunk.objects.filter(attachment=second).values_list("pk", flat=True))
    assert ids.isdisjoint(DocumentChunk.objects.filter(attachment=first).values_list("pk"))
    assert (
        set(ChunkVector.objects.filter(attachment=second).values_list("chunk_id", flat=True)) <= ids
    )
    # The same post-ready work as an ingested file: its source guide and its notebook's.
    assert Guide.objects.filter(attachment=second, kind="source").exists()
    assert Guide.objects.filter(notebook=second_note.notebook, kind="notebook").exists()


def test_a_reused_copy_is_searchable_and_citable_in_its_note(
    alice, alice_client, first, monkeypatch
):
    second_note = new_note(alice)
    calls = _refuse_pipeline(monkeypatch)
    second = ingest(upload(alice, second_note, PDF))
    assert calls == []
    assert second.timings["reused_from"] == first.pk
    scores: dict[int, list[tuple[int, float]]] = {}
    for note, attachment in ((first.note, first), (second_note, second)):
        scope = Scope(note_id=note.pk)
        lexical = search(user=alice, query=QUERY, scope=scope, mode="lexical").hits
        vector = search(user=alice, query=QUERY, scope=scope, mode="vector").hits
        assert lexical
        assert vector
        assert {chunk_of(h).attachment_id for h in lexical + vector} == {attachment.pk}
        scores[note.pk] = []
        for h in lexical:
            assert h.lexical is not None
            scores[note.pk].append((chunk_of(h).index, round(h.lexical, 6)))
    # The copied posting lists give the very same BM25 ranking and scores.
    assert scores[first.note.pk] == scores[second_note.pk]

    hit = search(user=alice, query=QUERY, scope=Scope(note_id=second_note.pk)).hits[0]
    assert hit.chunk is not None
    quote = " ".join(hit.chunk.content.split()[:12])
    response = alice_client.get(
        f"/attachments/{second.pk}/pages/", {"page": hit.chunk.page_number, "quote": quote}
    )
    assert response.status_code == 200
    assert '<mark id="quote">' in response.content.decode()


@pytest.mark.parametrize("deleted", ["first", "second"])
def test_deleting_either_copy_leaves_the_other_working(alice, alice_client, first, deleted):
    second = ingest(upload(alice, new_note(alice), PDF))
    assert "reused_from" in second.timings
    before = rows(first)
    gone, kept = (first, second) if deleted == "first" else (second, first)
    note_trash(note=gone.note)
    note_delete(note=gone.note)  # the note and, by cascade, its attachment and rows
    assert not NoteAttachment.objects.filter(pk=gone.pk).exists()
    assert not DocumentChunk.objects.filter(attachment_id=gone.pk).exists()
    kept.refresh_from_db()
    assert kept.status == "ready"
    assert rows(kept) == before
    assert_consistent(kept)
    for mode in ("lexical", "vector", "hybrid"):
        hits = search(user=alice, query=QUERY, scope=Scope(note_id=kept.note_id), mode=mode).hits
        assert hits, mode
        assert {chunk_of(h).attachment_id for h in hits} == {kept.pk}
    page = chunk_of(hits[0]).page_number
    response = alice_client.get(f"/attachments/{kept.pk}/pages/", {"page": page})
    assert response.status_code == 200


def test_deleting_one_attachment_through_the_service_keeps_the_other(alice, first):
    second = ingest(upload(alice, new_note(alice), PDF))
    services.attachment_delete(attachment=first)
    assert rows(second)["chunks"]
    hits = search(user=alice, query=QUERY, scope=Scope(note_id=second.note_id)).hits
    assert {chunk_of(h).attachment_id for h in hits} == {second.pk}


def test_never_reused_across_users(alice, bob, first):
    bobs = ingest(upload(bob, new_note(bob), PDF))
    assert bobs.status == "ready"
    assert "reused_from" not in bobs.timings
    assert "extract" in bobs.timings


def test_a_source_still_processing_or_from_another_model_is_not_reused(alice, first):
    NoteAttachment.objects.filter(pk=first.pk).update(status="processing")  # a re-run, say
    other = ingest(upload(alice, new_note(alice), PDF))
    assert other.status == "ready"
    assert "reused_from" not in other.timings
    assert "embed" in other.timings
    # Ready, but its vectors come from another model: not reusable either.
    NoteAttachment.objects.filter(pk=other.pk).update(embedding_model="another-model")
    third = ingest(upload(alice, new_note(alice), PDF))
    assert "reused_from" not in third.timings
    # Once a copy is ready with the configured model, the next one reuses it.
    fourth = ingest(upload(alice, new_note(alice), PDF))
    assert fourth.timings["reused_from"] == third.pk


def test_changed_content_under_the_same_name_is_ingested_as_a_new_version(alice):
    data = sample(PDF)
    ingest(upload(alice, new_note(alice), "paper.pdf", data))
    changed = data + b"\n% edited\n"  # other bytes, still the same readable PDF
    again = ingest(upload(alice, new_note(alice), "paper.pdf", changed))
    assert again.status == "ready"
    assert "reused_from" not in again.timings


def test_copying_twice_leaves_one_set_of_rows(alice, first):
    second = ingest(upload(alice, new_note(alice), PDF))
    copy_ingested(source_id=first.pk, target_id=second.pk)
    assert rows(second) == rows(first)
    assert_consistent(second)


def test_a_superseded_run_does_not_copy(alice, first, monkeypatch):
    second = upload(alice, new_note(alice), PDF)
    real = reusable_source

    def then_reset(**kwargs):
        found = real(**kwargs)
        # The user pressed "Reprocess" (or deleted it) while the run was starting.
        NoteAttachment.objects.filter(pk=second.pk).update(attempts=99)
        return found

    monkeypatch.setattr(ingestion, "reusable_source", then_reset)
    services.attachment_ingest(attachment_id=second.pk)
    second.refresh_from_db()
    assert second.status == "processing"  # left to the run that owns it now
    assert not DocumentChunk.objects.filter(attachment=second).exists()


def test_reprocessing_a_copy_ingests_it_for_real(alice, first):
    second = ingest(upload(alice, new_note(alice), PDF))
    assert "reused_from" in second.timings
    services.attachment_reprocess(attachment=second)
    second = ingest(second)
    assert second.status == "ready"
    assert "reused_from" not in second.timings
    assert "extract" in second.timings
    assert_consistent(second)


def test_a_copy_under_another_name_is_found_by_its_own_name(alice, first, monkeypatch):
    """The file's title is a field of the keyword index (BM25 over fields): a copy reused
    under another name is found by the words of its name, not by the first file's."""
    from tests.fixtures.documents import sample

    calls = _refuse_pipeline(monkeypatch)
    second = ingest(upload(alice, new_note(alice), "Ospreys-Field-Guide.pdf", sample(PDF)))
    assert calls == []
    assert second.timings["reused_from"] == first.pk

    def found(query: str) -> set[int]:
        hits = search(user=alice, query=query, scope=Scope(), mode="lexical").hits
        return {chunk_of(h).attachment_id for h in hits}

    assert found("ospreys") == {second.pk}
    assert second.pk not in found("text")  # the first file's name
    second.refresh_from_db()
    assert second.chunk_count == first.chunk_count
    assert_consistent(second)
