"""The first pass (PDFium's plain text per page): keyword-searchable within a second of the
run's start, replaced atomically by the structured pass, fenced like every write of a run,
and seen by nobody but the file's owners."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import F
from django.test import Client
from django.urls import reverse

from attachments import services
from attachments.models import DocumentChunk, DocumentPage, NoteAttachment, PostingList
from attachments.pdf import extract
from attachments.pdf.extract import PdfError
from attachments.services import ingestion
from search.retrieval import Scope, search
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import SAMPLE_PASSWORD, eval_pdf, upload

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture
def note(alice):
    return NoteFactory.create(notebook=NotebookFactory.create(owner=alice))


def _processing(attachment: NoteAttachment) -> ingestion._Run:
    """Claim the file as the worker does, and the run that owns it."""
    NoteAttachment.objects.filter(pk=attachment.pk).update(
        status=NoteAttachment.Status.PROCESSING, attempts=F("attempts") + 1
    )
    attachment.refresh_from_db()
    return ingestion._Run(attachment)


def _assert_verbatim(hit) -> None:
    """The hit opens the right page and its text is there, verbatim."""
    page = DocumentPage.objects.get(attachment=hit.chunk.attachment, number=hit.chunk.page_number)
    assert page.text[hit.chunk.start_char : hit.chunk.end_char] == hit.chunk.content


def _between_passes(monkeypatch, check) -> dict[str, Any]:
    """Run `check()` after the first pass commits and before the structured pass starts."""
    seen: dict[str, Any] = {}
    real = extract.extract_text

    def extract_text(*args, **kwargs):
        seen["result"] = check()
        return real(*args, **kwargs)

    monkeypatch.setattr(ingestion, "extract_text", extract_text)
    return seen


def test_keyword_search_finds_the_file_after_the_first_pass_quoting_its_page(
    alice, bob, note, monkeypatch
):
    attachment = upload(alice, note, "text.pdf")

    def check():
        row = NoteAttachment.objects.get(pk=attachment.pk)
        found = {
            mode: search(user=alice, query="kingfisher", scope=Scope(note_id=note.pk), mode=mode)
            for mode in ("lexical", "hybrid")
        }
        for result in found.values():
            for hit in result.hits:
                _assert_verbatim(hit)  # while the first pass's pages are there
        others = search(user=bob, query="kingfisher", mode="lexical")
        return row, found, others, list(DocumentChunk.objects.filter(attachment=attachment))

    seen = _between_passes(monkeypatch, check)
    services.attachment_ingest(attachment_id=attachment.pk)

    row, found, others, chunks = seen["result"]
    assert row.status == "processing"
    assert row.searchable_at is not None
    assert row.keyword_searchable
    assert row.status_label == "Searchable by keywords"
    assert chunks
    assert all(c.metadata == {"provisional": True} for c in chunks)
    assert all(not c.vectors.exists() for c in chunks)
    for mode, result in found.items():
        assert result.hits, mode
        hit = result.hits[0]
        assert hit.chunk.attachment_id == attachment.pk
        assert hit.chunk.page_number == 2  # the kingfishers' page
        assert "kingfisher" in hit.chunk.content
    assert not found["hybrid"].degraded_reason  # hybrid just ranks them by their words
    assert others.hits == []  # another user never sees them

    attachment.refresh_from_db()
    assert attachment.status == "ready"
    assert attachment.timings["searchable"] <= attachment.timings["fast_pass"] + 5
    assert "fast_pass" in attachment.timings
    final = list(DocumentChunk.objects.filter(attachment=attachment))
    assert final
    assert not any(c.metadata.get("provisional") for c in final)
    assert not {c.pk for c in chunks} & {c.pk for c in final}
    assert all(c.vectors.exists() for c in final)
    # the posting lists are the structured chunks' only
    ids = {i for p in PostingList.objects.filter(attachment=attachment) for i in p.chunk_ids}
    assert ids <= {c.pk for c in final}
    hit = search(user=alice, query="kingfisher", scope=Scope(note_id=note.pk), mode="lexical").hits[
        0
    ]
    assert hit.chunk is not None
    assert hit.chunk.page_number == 2
    _assert_verbatim(hit)


def test_the_structured_pass_ends_with_what_it_made_without_a_first_pass(alice, note, monkeypatch):
    """Same chunks, pages and posting lists as a run whose first pass found nothing."""
    with_fast = upload(alice, note, "text.pdf")
    services.attachment_ingest(attachment_id=with_fast.pk)

    other = NoteFactory.create(notebook=note.notebook)
    without = upload(alice, other, "text.pdf")
    NoteAttachment.objects.filter(pk=without.pk).update(sha256="0" * 64)  # no reuse by hash

    def no_fast_text(*args, **kwargs):
        raise PdfError("no first pass")

    monkeypatch.setattr(ingestion, "fast_text", no_fast_text)
    services.attachment_ingest(attachment_id=without.pk)

    def rows(attachment):
        chunks = attachment.chunks.order_by("index").values_list(
            "page_number", "content", "start_char", "end_char", "heading_path", "metadata"
        )
        pages = attachment.pages.order_by("number").values_list("text", "lines", "running")
        lists = PostingList.objects.filter(attachment=attachment).values_list("lexeme", "df")
        return list(chunks), list(pages), sorted(lists)

    with_fast.refresh_from_db()
    without.refresh_from_db()
    assert with_fast.status == without.status == "ready"
    assert "fast_pass" in with_fast.timings
    assert "fast_pass" not in without.timings
    assert rows(with_fast) == rows(without)
    assert with_fast.chunk_count == without.chunk_count
    assert with_fast.token_total == without.token_total


@pytest.mark.eval  # (no sample in Chinese: the samples embed no CJK font)
def test_chinese_is_segmented_by_the_first_pass_as_by_the_second(alice, bob, note):
    attachment = upload(alice, note, "lshort-zh-cn.pdf", eval_pdf("lshort-zh-cn.pdf"))
    run = _processing(attachment)
    ingestion._fast_pass(run, ingestion._source(attachment))

    attachment.refresh_from_db()
    assert attachment.language == "zh"
    assert attachment.search_config == "simple"
    assert attachment.page_count == 139
    assert attachment.pages.count() == 139
    result = search(user=alice, query="宏包", scope=Scope(note_id=note.pk), mode="lexical")
    assert result.hits
    assert all(h.chunk is not None and h.chunk.attachment_id == attachment.pk for h in result.hits)
    for hit in result.hits:
        assert hit.chunk is not None
        assert "宏包" in hit.chunk.content
        _assert_verbatim(hit)
    assert search(user=bob, query="宏包", mode="lexical").hits == []


@pytest.mark.parametrize("how", ["deleted", "superseded"])
def test_a_file_deleted_or_superseded_during_the_first_pass_gets_nothing_written(
    alice, note, monkeypatch, how
):
    attachment = upload(alice, note, "text.pdf")
    pk = attachment.pk
    real = extract.fast_text

    def fast_text(*args, **kwargs):
        extraction = real(*args, **kwargs)
        row = NoteAttachment.objects.get(pk=pk)
        if how == "deleted":
            services.attachment_delete(attachment=row)
        else:  # reprocessed: a newer run owns the row
            NoteAttachment.objects.filter(pk=pk).update(
                status=NoteAttachment.Status.PENDING, attempts=0
            )
        return extraction

    monkeypatch.setattr(ingestion, "fast_text", fast_text)
    services.attachment_ingest(attachment_id=pk)

    assert not DocumentPage.objects.filter(attachment_id=pk).exists()
    assert not DocumentChunk.objects.filter(attachment_id=pk).exists()
    assert not PostingList.objects.filter(attachment_id=pk).exists()
    if how == "superseded":
        row = NoteAttachment.objects.get(pk=pk)
        assert row.status == "pending"
        assert row.searchable_at is None
        assert row.chunk_count == 0


def test_a_password_protected_pdf_gets_its_first_pass_with_the_password(
    alice, note, monkeypatch, django_capture_on_commit_callbacks
):
    attachment = upload(alice, note, "locked.pdf")
    assert attachment.status == "needs_password"
    with django_capture_on_commit_callbacks(execute=False):
        attachment = services.attachment_submit_password(
            attachment=attachment, password=SAMPLE_PASSWORD
        )

    def check():
        result = search(
            user=alice, query="kingfisher", scope=Scope(note_id=note.pk), mode="lexical"
        )
        for hit in result.hits:
            _assert_verbatim(hit)
        return result

    seen = _between_passes(monkeypatch, check)
    services.attachment_ingest(attachment_id=attachment.pk)
    assert seen["result"].hits
    assert seen["result"].hits[0].chunk.attachment_id == attachment.pk
    attachment.refresh_from_db()
    assert attachment.status == "ready"
    assert "fast_pass" in attachment.timings


def test_a_scanned_pdf_gets_nothing_from_the_first_pass(alice, note):
    attachment = upload(alice, note, "scanned.pdf")
    run = _processing(attachment)
    ingestion._fast_pass(run, ingestion._source(attachment))
    attachment.refresh_from_db()
    assert attachment.searchable_at is None
    assert not attachment.chunks.exists()
    assert "fast_pass" not in run.timings


def test_the_row_and_the_api_say_searchable_by_keywords(
    alice, alice_client: Client, alice_api: Client, note
):
    attachment = upload(alice, note, "text.pdf")
    run = _processing(attachment)
    ingestion._fast_pass(run, ingestion._source(attachment))

    row = alice_client.get(reverse("attachments:row", args=[attachment.pk]))
    assert "Searchable by keywords" in row.content.decode()
    api = alice_api.get(f"/api/attachments/{attachment.pk}")
    assert api.status_code == 200
    body = api.json()
    assert body["status"] == "processing"
    assert body["keyword_searchable"] is True
    assert body["status_label"] == "Searchable by keywords"
    assert body["searchable_at"]
