"""Guides written by a real django-q2 worker after real ingestion: the offline source guide
(central sentences verbatim on their page, an outline without footnotes, questions that
retrieval answers), regenerated on reprocess; the notebook guide refreshed when a second PDF
becomes ready and when one is deleted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from attachments import services as attachment_services
from attachments.models import DocumentPage, NoteAttachment
from attachments.pdf.layout import SMALL_PRINT
from grounding.citations import normalise, quotable
from guides.models import Guide
from search.retrieval import Scope, search
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import upload
from tests.fixtures.waiting import wait_until
from tests.workers import Worker, run_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def wait(what: str, check: Callable[[], object], worker: Worker, timeout: float = 300) -> object:
    def found() -> object:
        worker.check_alive()
        return check()

    return wait_until(
        found, timeout, interval=0.3, message=lambda: f"{what}:\n{worker.tail()}"
    )  # fmt: skip


def ready_guide(**where: object) -> Guide | None:
    return Guide.objects.filter(status="ready", **where).first()


def small_print(attachment: NoteAttachment) -> set[str]:
    """The lines of the PDF set smaller than its body text: footnotes, captions."""
    pages = list(DocumentPage.objects.filter(attachment=attachment))
    sizes: Counter[float] = Counter()
    for page in pages:
        for start, end, size, _ in page.lines:
            sizes[round(size * 2) / 2] += end - start
    body = sizes.most_common(1)[0][0]
    return {
        " ".join(page.text[start:end].split())
        for page in pages
        for start, end, size, _ in page.lines
        if size and size < body * SMALL_PRINT
    }


def assert_offline_source_guide(guide: Guide, attachment: NoteAttachment) -> None:
    assert guide.generator == "offline"
    assert guide.title
    assert 3 <= len(guide.summary) <= 5
    pages = {p.number: quotable(p.text) for p in attachment.pages.all()}
    for sentence in guide.summary:
        (citation,) = sentence["citations"]
        assert sentence["quoted"]
        assert citation["quote"] == sentence["text"]
        assert citation["attachment_id"] == attachment.pk
        assert normalise(sentence["text"]) in pages[citation["page"]], sentence
    assert guide.outline
    footnotes = small_print(attachment)
    assert footnotes  # the control: this PDF has footnotes
    for entry in guide.outline:
        assert entry["text"] not in footnotes, entry
        assert not entry["text"].endswith("."), entry
        assert entry["attachment_id"] == attachment.pk
    assert guide.topics
    assert 1 <= len(guide.questions) <= 3
    owner = attachment.note.notebook.owner
    for question in guide.questions:
        hits = search(
            user=owner, query=question["text"], scope=Scope(attachment_ids=[attachment.pk]),
            limit=3, rerank=False,
        ).hits  # fmt: skip
        assert question["chunk_id"] in [hit.chunk.pk for hit in hits if hit.chunk], question


def test_guides_follow_their_sources_through_a_real_worker(alice, settings, tmp_path):
    settings.GUIDE_NOTEBOOK_DELAY = 0  # the hooks run here (reprocess, delete) …
    env = {"GUIDE_NOTEBOOK_DELAY": "0"}  # … and in the worker (ready)
    notebook = NotebookFactory.create(owner=alice, title="LaTeX")
    note = NoteFactory.create(notebook=notebook)
    first = upload(alice, note, "text.pdf")
    with run_worker(tmp_path / "worker.log", **env) as worker:
        guide = wait("the source guide", lambda: ready_guide(attachment=first), worker)
        assert isinstance(guide, Guide)
        first.refresh_from_db()
        assert_offline_source_guide(guide, first)
        book = wait("the notebook guide", lambda: ready_guide(kind="notebook"), worker)
        assert isinstance(book, Guide)
        assert [s["file"] for s in book.sources] == ["text.pdf"]
        assert book.summary
        assert book.outline

        second = upload(alice, NoteFactory.create(notebook=notebook), "other.pdf")
        book = wait(
            "the notebook guide over both PDFs",
            lambda: Guide.objects.filter(kind="notebook", status="ready",
                                         sources__contains=[{"file": "other.pdf"}]).first(),
            worker,
        )  # fmt: skip
        assert isinstance(book, Guide)
        assert {s["file"] for s in book.sources} == {"text.pdf", "other.pdf"}
        assert {c["file"] for s in book.summary for c in s["citations"]} == {
            "text.pdf", "other.pdf"}  # fmt: skip
        assert {e["file"] for e in book.outline} == {"text.pdf", "other.pdf"}

        # Reprocess: the guide is asked for again and written from the new run.
        before = Guide.objects.get(attachment=first)
        attachment_services.attachment_reprocess(attachment=first)
        assert Guide.objects.get(attachment=first).token > before.token
        regenerated = wait(
            "the regenerated guide",
            lambda: Guide.objects.filter(attachment=first, status="ready",
                                         ready_at__gt=before.ready_at).first(),
            worker,
        )  # fmt: skip
        assert isinstance(regenerated, Guide)
        first.refresh_from_db()
        assert first.attempts == 1
        assert first.ready_at > before.ready_at
        assert_offline_source_guide(regenerated, first)

        second_id = second.pk
        attachment_services.attachment_delete(attachment=second)
        book = wait(
            "the notebook guide without the deleted PDF",
            lambda: Guide.objects.filter(kind="notebook", status="ready",
                                         sources=[{"attachment_id": first.pk,
                                                   "file": "text.pdf"}]).first(),
            worker,
        )  # fmt: skip
        assert isinstance(book, Guide)
        assert {c["file"] for s in book.summary for c in s["citations"]} == {"text.pdf"}
    assert not Guide.objects.filter(attachment_id=second_id).exists()
