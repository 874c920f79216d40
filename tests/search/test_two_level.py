"""Two-level search: documents ranked first (document-level BM25 and the documents of the
nearest windows), then passages searched within the best of them."""

from __future__ import annotations

import math

import pytest

from attachments.models import NoteAttachment
from notes.services import note_create
from search import bm25, retrieval
from search.retrieval import Scope, search
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.search import add_vectors, make_attachment, unit

pytestmark = pytest.mark.django_db

FILLER = [f"passage {n} about boats harbours and sails" for n in range(20)]


@pytest.fixture
def library(alice):
    """A document that returns to the aurora throughout, one with a single passage repeating
    the word, and three without it."""
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    topic = make_attachment(
        note,
        [
            "the aurora borealis over the fjord at night",
            "how long the aurora lasted and when it faded",
            "photographing the aurora with a long exposure",
            "the ferry timetable for the winter months",
        ],
        name="topic.pdf",
    )
    repeated = make_attachment(
        note, ["aurora aurora aurora aurora aurora aurora", *FILLER], name="repeated.pdf"
    )
    others = [make_attachment(note, [f"{n} rivers and lakes", "mountains"]) for n in range(3)]
    return note, topic, repeated, others


def _files(result) -> list[str]:
    return [hit.chunk.attachment.original_name for hit in result.hits if hit.chunk]


def test_document_bm25_counts_the_passages_that_hold_a_term(alice, library):
    note, topic, repeated, _ = library
    scope = retrieval.scoped_attachments(user=alice, scope=Scope(note_id=note.pk))
    ranked = dict(bm25.rank_documents(text="aurora", scope=scope, limit=10))
    assert set(ranked) == {topic.pk, repeated.pk}
    # N = 5 documents, two hold the term; tf = passages holding it, length = passages.
    idf = math.log(1 + (5 - 2 + 0.5) / (2 + 0.5))
    avgdl = (4 + 21 + 2 * 3) / 5

    def score(tf: int, length: int) -> float:
        return idf * tf * (bm25.K1 + 1) / (tf + bm25.K1 * (1 - bm25.B + bm25.B * length / avgdl))

    assert ranked[topic.pk] == pytest.approx(score(3, 4))
    assert ranked[repeated.pk] == pytest.approx(score(1, 21))


def test_passages_are_searched_within_the_best_documents(alice, library, settings):
    note, topic, _, _ = library
    scope = Scope(note_id=note.pk, include_notes=False)
    settings.SEARCH_TWO_LEVEL_DOCUMENTS = 0  # one level: the repeated word's passage leads
    one_level = search(user=alice, query="aurora", scope=scope, limit=5)
    assert _files(one_level)[0] == "repeated.pdf"
    assert "two_level" not in one_level.info

    settings.SEARCH_TWO_LEVEL_DOCUMENTS, settings.SEARCH_TWO_LEVEL_MIN_DOCUMENTS = 1, 3
    two_level = search(user=alice, query="aurora", scope=scope, limit=5)
    assert set(_files(two_level)) == {"topic.pdf"}
    assert len(two_level.hits) == 3
    assert two_level.info["two_level"]["attachment_ids"] == [topic.pk]
    assert "documents" in two_level.timings


def test_the_documents_of_the_nearest_windows_rank_too(alice, library, settings):
    """A document the query's words miss is kept when its windows are nearest the query."""
    note, topic, repeated, others = library
    (near,) = others[0].chunks.filter(index=0)
    add_vectors(near, unit(0))
    settings.SEARCH_TWO_LEVEL_DOCUMENTS, settings.SEARCH_TWO_LEVEL_MIN_DOCUMENTS = 3, 3
    kept, legs = retrieval.top_documents(
        user=alice, query="aurora", scope=Scope(note_id=note.pk), keep=3,
        embedding=lambda: unit(0), vector_weight_of_query=1.0,
    )  # fmt: skip
    ((pk, similarity),) = legs["vector"]
    assert pk == others[0].pk
    assert similarity == pytest.approx(1.0)
    assert set(kept) == {topic.pk, repeated.pk, others[0].pk}


def test_notes_are_still_searched_and_anchors_kept(alice, library, settings):
    note, topic, repeated, _ = library
    written = note_create(notebook=note.notebook, author=alice, title="aurora", body="aurora")
    settings.SEARCH_TWO_LEVEL_DOCUMENTS, settings.SEARCH_TWO_LEVEL_MIN_DOCUMENTS = 1, 3
    found = search(user=alice, query="aurora", scope=Scope(notebook_id=note.notebook_id),
                   limit=10, anchors=[repeated.pk])  # fmt: skip
    kinds = {
        (hit.kind, hit.chunk.attachment_id if hit.chunk else hit.note.pk) for hit in found.hits
    }
    assert ("note", written.pk) in kinds
    assert ("document", repeated.pk) in kinds  # the previous answer's document stays in
    assert found.info["two_level"]["attachment_ids"] == sorted([topic.pk, repeated.pk])


def test_a_small_scope_is_searched_in_one_level(alice, library, settings):
    note, *_ = library
    settings.SEARCH_TWO_LEVEL_DOCUMENTS, settings.SEARCH_TWO_LEVEL_MIN_DOCUMENTS = 1, 5
    found = search(user=alice, query="aurora", scope=Scope(note_id=note.pk), limit=5)
    assert "two_level" not in found.info  # five documents: not more than the threshold
    assert _files(found)[0] == "repeated.pdf"


def test_the_first_level_never_ranks_another_users_documents(alice, bob, library, settings):
    bobs = NoteFactory.create(notebook=NotebookFactory.create(owner=bob))
    theirs = make_attachment(bobs, ["aurora aurora", "aurora borealis", "aurora"], name="b.pdf")
    add_vectors(theirs.chunks.first(), unit(0))
    settings.SEARCH_TWO_LEVEL_DOCUMENTS, settings.SEARCH_TWO_LEVEL_MIN_DOCUMENTS = 2, 3
    found = search(user=alice, query="aurora", scope=Scope(), limit=10)
    assert theirs.pk not in found.info["two_level"]["attachment_ids"]
    assert "b.pdf" not in _files(found)
    kept, _ = retrieval.top_documents(
        user=alice, query="aurora", scope=Scope(), keep=10, embedding=lambda: unit(0),
        vector_weight_of_query=1.0,
    )  # fmt: skip
    assert theirs.pk not in kept
    assert (
        NoteAttachment.objects.filter(pk__in=kept).exclude(note__notebook__owner=alice).count() == 0
    )
