"""Retrieval groundwork: BM25 in SQL against hand-computed values, scope, hostile queries."""

from __future__ import annotations

import io
import random

import pytest
from django.db import connection

from attachments.models import DocumentChunk, PostingList
from attachments.services.ingestion import index_text
from core.language import segment_for_search, tsvector_sql, word_count_sql
from notes.models import Note
from notes.services import note_create, note_trash
from search import bm25 as bm25_module
from search import fusion, retrieval
from search.retrieval import Scope
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.search import add_vectors, as_indexed, bm25, make_attachment, unit

pytestmark = pytest.mark.django_db


CORPUS = [
    "apple banana apple",
    "banana cherry",
    "cherry cherry cherry date elderberry fig",
    "apple",
    "grape",
]


def test_bm25_matches_hand_computed_scores(alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    attachment = make_attachment(note, CORPUS)
    docs = [as_indexed(text.split()) for text in CORPUS]
    got = {pk: score for (_, pk), score in retrieval.lexical(
        user=alice, query="apple cherry", scope=Scope(), limit=10)}  # fmt: skip
    by_index = {c.pk: c.index for c in attachment.chunks.all()}
    expected = {i: bm25(["apple", "cherry"], d, docs) for i, d in enumerate(docs)}
    assert {by_index[pk] for pk in got} == {i for i, s in expected.items() if s > 0}
    for pk, score in got.items():
        assert score == pytest.approx(expected[by_index[pk]], rel=1e-9)
    ranked = [by_index[pk] for (_, pk), _ in retrieval.lexical(
        user=alice, query="apple cherry", scope=Scope(), limit=10)]  # fmt: skip
    assert ranked == sorted(expected, key=lambda i: -expected[i])[: len(ranked)]


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 40])
@pytest.mark.parametrize("query", ["zebra file use", "zebra okapi file", "file use", "okapi"])
def test_the_top_k_is_a_full_bm25_ranking(alice, query, limit):
    """Scores come from posting lists, not from the chunks' tsvectors; the top k must equal a
    full ranking of every passage, whatever the query and k."""
    rng = random.Random(7)  # noqa: S311 - a fixed corpus, not a secret
    docs = []
    for i in range(40):
        words = ["file"] * rng.randint(0, 3) + ["use"] * rng.randint(1, 2)
        words += ["zebra"] * (i % 9 == 0) + ["okapi"] * (i % 13 == 0) * rng.randint(1, 3)
        words += [rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(rng.randint(2, 9))]
        docs.append(words)
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    attachment = make_attachment(note, [" ".join(d) for d in docs])
    by_index = {c.pk: c.index for c in attachment.chunks.all()}
    docs = [as_indexed(d) for d in docs]
    expected = {i: bm25(query.split(), d, docs) for i, d in enumerate(docs)}
    best = sorted((i for i in expected if expected[i] > 0), key=lambda i: (-expected[i], i))
    got = retrieval.lexical(user=alice, query=query, scope=Scope(include_notes=False), limit=limit)
    assert [s for _, s in got] == pytest.approx([expected[i] for i in best[:limit]], rel=1e-9)
    assert {by_index[pk] for (_, pk), _ in got} <= set(best)


@pytest.mark.parametrize("ids", ["close together", "far apart"])
def test_files_and_notes_are_ranked_together_by_bm25(alice, ids, monkeypatch):
    """Postings of many lists (several files, several terms) and of notes come back packed in
    one row per kind; each score must still be the passage's own, and the order one ranking,
    whether the sums are kept in an array indexed by id or after sorting the ids."""
    if ids == "far apart":
        monkeypatch.setattr(bm25_module, "DENSE_IDS_PER_POSTING", 0)
        monkeypatch.setattr(bm25_module, "DENSE_IDS_SLACK", 0)
    rng = random.Random(11)  # noqa: S311 - a fixed corpus, not a secret
    vocabulary = ["file", "use", "zebra", "okapi", "alpha", "beta", "gamma", "delta"]

    def words() -> list[str]:
        return [rng.choice(vocabulary) for _ in range(rng.randint(1, 12))]

    notebook = NotebookFactory.create(owner=alice)
    passages: dict[tuple[str, int], list[str]] = {}
    for _ in range(3):
        holder = note_create(notebook=notebook, author=alice, title="", body="")
        texts = [words() for _ in range(12)]
        attachment = make_attachment(holder, [" ".join(t) for t in texts])
        for chunk in attachment.chunks.all():
            passages["document", chunk.pk] = as_indexed(texts[chunk.index])
    for _ in range(6):
        title, body = rng.choice(vocabulary), words()
        note = note_create(notebook=notebook, author=alice, title=title, body=" ".join(body))
        passages["note", note.pk] = [title, *body]
    # Untitled holders index "Untitled note"; they are passages too.
    for note in Note.objects.filter(notebook=notebook, body=""):
        passages["note", note.pk] = note.title.lower().split()
    # Random words read as Hungarian or Swedish; index every note as `simple`, like the files.
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE notes_note SET search_config = 'simple', "  # noqa: S608 - our SQL
            f"search_vector = {tsvector_sql('simple', 'title || %s || body')} "
            "WHERE notebook_id = %s",
            ["simple", " ", notebook.pk],
        )
        cursor.execute(
            f"UPDATE notes_note SET token_len = {word_count_sql()} WHERE notebook_id = %s",  # noqa: S608
            [notebook.pk],
        )

    docs = list(passages.values())
    query = "zebra okapi file"
    expected = {key: bm25(query.split(), text, docs) for key, text in passages.items()}
    best = sorted((k for k in expected if expected[k] > 0), key=lambda k: (-expected[k], k))
    got = retrieval.lexical(user=alice, query=query, scope=Scope(), limit=len(passages))
    assert [key for key, _ in got] == best
    assert [score for _, score in got] == pytest.approx([expected[k] for k in best], rel=1e-9)
    assert {kind for kind, _ in best} == {"document", "note"}


def test_idf_comes_from_the_scope(alice):
    notebook = NotebookFactory.create(owner=alice)
    rare_here = NoteFactory.create(notebook=notebook)
    common_elsewhere = NoteFactory.create(notebook=notebook)
    make_attachment(rare_here, ["zebra stripes", "plain words", "more words"])
    make_attachment(common_elsewhere, ["zebra", "zebra herd", "zebra crossing"])
    everywhere = retrieval.lexical(user=alice, query="zebra", scope=Scope(), limit=10)
    one_note = retrieval.lexical(
        user=alice, query="zebra", scope=Scope(note_id=rare_here.pk), limit=10
    )
    assert len(one_note) == 1
    score_in_note = one_note[0][1]
    score_everywhere = dict(everywhere)[one_note[0][0]]
    assert score_in_note > score_everywhere  # rarer within the note, so more telling


def test_chinese_queries_are_segmented_like_the_index(alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    make_attachment(note, ["人工智能是计算机科学的一个分支", "今天天气很好"])
    hits = retrieval.lexical(user=alice, query="人工智能", scope=Scope(), limit=10)
    assert len(hits) == 1


def test_only_chinese_runs_are_segmented():
    """jieba cuts the Chinese; Latin words, commands and numbers reach PostgreSQL whole (jieba
    cut "Möbius" at its accented letter and read ASCII character by character)."""
    text = segment_for_search("用 Möbius 带和\\documentclass{article}排版人工智能 2.5pt", "zh")
    words = text.split()
    assert "Möbius" in words
    assert "人工智能" in words
    assert "\\documentclass{article}" in words
    assert "2.5pt" in words
    assert "排版" in words


@pytest.mark.parametrize(
    "query",
    ["", "   ", "'", "a & | ! b", "(((", "<-> <2>", "foo:* bar:AB", "\\", "' OR 1=1 --", "x" * 5000,
     "café's \"quoted\" [brackets] {braces}", "\x00null"],
)  # fmt: skip
def test_hostile_queries_do_not_raise(alice, query):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    make_attachment(note, ["some ordinary words", "café au lait"], config="english")
    query = query.replace("\x00", "")
    retrieval.lexical(user=alice, query=query, scope=Scope(), limit=5)


def test_scope_excludes_other_users_trashed_notes_and_unready_files(alice, bob):
    mine = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    trashed = NoteFactory.create(notebook=mine.notebook)
    bobs = NoteFactory.create(notebook=NotebookFactory.create(owner=bob))
    make_attachment(mine, ["canary visible to alice"])
    make_attachment(trashed, ["canary in the trash"])
    make_attachment(mine, ["canary still processing"], status="processing")
    make_attachment(bobs, ["canary zqxj bob only"])
    note_trash(note=trashed)
    hits = retrieval.lexical(user=alice, query="canary zqxj", scope=Scope(), limit=50)
    contents = {DocumentChunk.objects.get(pk=pk).content for (_, pk), _ in hits}
    assert contents == {"canary visible to alice"}
    assert (
        retrieval.lexical(user=alice, query="canary", scope=Scope(note_id=bobs.pk), limit=50) == []
    )


def test_vector_search_is_scoped_and_ordered(alice, bob):
    mine = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    bobs = NoteFactory.create(notebook=NotebookFactory.create(owner=bob))
    a = make_attachment(mine, ["one", "two", "three"])
    b = make_attachment(bobs, ["bob"])
    for i, chunk in enumerate(a.chunks.order_by("index")):
        add_vectors(chunk, unit(i))
    add_vectors(b.chunks.get(), unit(1))  # identical to the query: must still not show up
    hits = retrieval.vector(user=alice, embedding=unit(1), scope=Scope(), limit=10)
    assert next(DocumentChunk.objects.get(pk=pk).content for (_, pk), _ in hits) == "two"
    assert len(hits) == 3
    assert hits[0][1] == pytest.approx(1.0)


def test_rrf_rewards_agreement():
    fused = fusion.rrf({"lexical": [(1, 9.0), (2, 5.0)], "vector": [(2, 0.9), (3, 0.8)]})
    assert max(fused, key=lambda pk: fused[pk]) == 2
    assert fused[2] == pytest.approx(1 / 62 + 1 / 61)


def test_token_len_counts_indexed_words(alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    attachment = make_attachment(note, ["apple banana apple"])
    assert attachment.chunks.get().token_len == len(as_indexed(["apple", "banana", "apple"]))


def test_a_word_counts_more_in_the_title_and_the_headings_than_in_the_text(alice, settings):
    """BM25F: the passage under a heading naming the word, or in a file named by it, outranks
    one that has it once in its text; the scores are BM25's over the weighted words."""
    settings.BM25_TITLE_WEIGHT, settings.BM25_SECTION_WEIGHT = 3, 2
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    texts = ["queens lay eggs in spring", "the hive holds frames", "a swarm leaves the hive"]
    attachment = make_attachment(note, texts)
    attachment.chunks.filter(index=1).update(heading_path=["Keeping", "The queen"])
    index_text(attachment, "", "simple")
    named = make_attachment(note, ["notes on frames and boxes"], name="queen-rearing.pdf")
    by_pk = {c.pk: c for c in [*attachment.chunks.all(), *named.chunks.all()]}
    titles = {attachment.pk: "x", named.pk: "queen rearing"}
    docs = {
        pk: as_indexed(c.content.split(), title=titles[c.attachment_id],
                       section=" ".join(c.heading_path))
        for pk, c in by_pk.items()
    }  # fmt: skip
    got = retrieval.lexical(user=alice, query="queen", scope=Scope(include_notes=False), limit=10)
    expected = {pk: bm25(["queen"], d, list(docs.values())) for pk, d in docs.items()}
    assert [by_pk[pk].content for (_, pk), _ in got] == [
        "notes on frames and boxes",
        "the hive holds frames",
    ]  # the title's weight (3) over the heading's (2); the text never says "queen"
    for (_, pk), score in got:
        assert score == pytest.approx(expected[pk], rel=1e-9)
    settings.BM25_TITLE_WEIGHT = settings.BM25_SECTION_WEIGHT = 0
    index_text(attachment, "", "simple")
    index_text(named, "", "simple")
    assert retrieval.lexical(user=alice, query="queen", scope=Scope(), limit=10) == []


def test_each_file_keeps_its_bm25_statistics_and_they_go_with_it(alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    attachment = make_attachment(note, ["apple banana apple", "banana cherry", "cherry"])
    attachment.refresh_from_db()
    t = len(as_indexed([]))  # the title x, as many times as its weight, in every chunk
    assert (attachment.chunk_count, attachment.token_total) == (3, 6 + 3 * t)
    ids = [c.pk for c in attachment.chunks.order_by("index")]
    lists = {p.lexeme: (p.df, p.chunk_ids, p.tfs, p.lens) for p in PostingList.objects.all()}
    assert lists == {
        "apple": (1, ids[:1], [2], [3 + t]),
        "banana": (2, ids[:2], [1, 1], [3 + t, 2 + t]),
        "cherry": (2, ids[1:], [1, 1], [2 + t, 1 + t]),
        "x": (3, ids, [t, t, t], [3 + t, 2 + t, 1 + t]),
    }
    index_text(attachment, "", "simple")  # indexing again replaces, never adds
    assert PostingList.objects.filter(attachment=attachment).count() == 4
    attachment.delete()
    assert not PostingList.objects.exists()


def test_stop_words_in_simple_indexed_text_do_not_outrank_real_terms(alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    # English licence text inside a Chinese manual is indexed with `simple` (stop words kept).
    make_attachment(note, ["how do i get all of the things in the and then back to it"])
    english = make_attachment(
        note, ["Use sink to divert output to a log file.", "Other text about plots."],
        config="english",
    )  # fmt: skip
    hits = retrieval.lexical(
        user=alice, query="How do I send all of the output to a log file?", scope=Scope(), limit=5
    )
    assert DocumentChunk.objects.get(pk=hits[0][0][1]).attachment_id == english.pk


def test_reindex_keywords_rebuilds_files_and_notes_with_the_weights_now_set(alice, settings):
    from django.core.management import call_command

    settings.BM25_TITLE_WEIGHT, settings.BM25_SECTION_WEIGHT = 3, 2
    notebook = NotebookFactory.create(owner=alice)
    note = note_create(notebook=notebook, author=alice, title="Quinoa", body="cook it slowly")
    attachment = make_attachment(note, ["apple banana apple"])
    assert attachment.chunks.get().token_len == 6  # three words and the title x three times
    note.refresh_from_db()
    titled = note.token_len
    settings.BM25_TITLE_WEIGHT = 0
    call_command("reindex_keywords", stdout=io.StringIO())
    assert attachment.chunks.get().token_len == 3
    assert PostingList.objects.filter(attachment=attachment, lexeme="x").count() == 0
    note.refresh_from_db()
    assert note.token_len == titled - 3  # its title's one word counted three times, gone
