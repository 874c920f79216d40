"""Sentences weighed for an answer are embedded once per chunk and kept: the next answer over
the same passages reads them back instead of embedding them again, with the same result."""

from __future__ import annotations

import numpy as np
import pytest

from attachments.models import DocumentChunk, SentenceVector
from core.embeddings import get_embedder
from grounding.sentence_vectors import digest, embed_weighed, similarities
from tests.fixtures.answers import QUESTION, answer

pytestmark = pytest.mark.django_db


class Counting:
    """The real embedder, counting the texts it is asked to embed."""

    def __init__(self) -> None:
        self.inner = get_embedder()
        self.model_name = self.inner.model_name
        self.texts: list[str] = []

    def embed(self, texts: list[str], *, timeout: float | None = None) -> list[list[float]]:
        self.texts += texts
        return self.inner.embed(texts, timeout=timeout)


def test_the_second_answer_over_the_same_passages_embeds_only_the_question(pdf_note, monkeypatch):
    counting = Counting()
    monkeypatch.setattr("grounding.evidence.get_embedder", lambda: counting)
    first = answer(pdf_note, QUESTION)
    weighed = len(counting.texts)
    assert weighed > 5  # the question and the sentences of the passages found
    kept = SentenceVector.objects.filter(model=counting.model_name).count()
    assert kept == weighed - 1  # every sentence of a chunk, not the question

    counting.texts.clear()
    second = answer(pdf_note, QUESTION)
    assert counting.texts == [QUESTION]  # only the question: the sentences were read back
    assert second.content == first.content
    assert second.citations == first.citations
    assert SentenceVector.objects.count() == kept


def test_stored_vectors_score_as_fresh_ones_and_notes_are_not_stored(pdf_note):
    chunk = DocumentChunk.objects.filter(attachment__note=pdf_note).first()
    assert chunk is not None
    items = [(chunk.pk, "The grey heron waits by the millpond."), (None, "A note's line.")]
    embedder = get_embedder()
    q1, fresh = embed_weighed(embedder, "Where does the heron wait?", items, timeout=10)
    assert list(SentenceVector.objects.values_list("chunk_id", "digest")) == [
        (chunk.pk, digest(items[0][1]))
    ]
    q2, again = embed_weighed(embedder, "Where does the heron wait?", items, timeout=10)
    assert np.allclose(fresh, again, atol=1e-6)
    assert np.allclose(similarities(q1, fresh), similarities(q2, again), atol=1e-6)
    chunk.delete()  # a reindexed file's sentences go with its chunks
    assert not SentenceVector.objects.exists()
