"""Sentence embeddings for weighing passages, embedded once per chunk and kept.

`grounding.weigh` scores every sentence of the passages a search found by its embedding
similarity to the question. Embedding them is most of an offline answer's CPU (about 60
sentences, a second on one core), and the same passages come back for the next question about
the same pages, from any web process. So the sentences of document chunks are stored
(attachments.SentenceVector, keyed by chunk, model and the sentence's digest) when first
embedded and read back after; only sentences not seen before are embedded. Notes change
under their id and are embedded each time (they are short and few).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from django.db import DatabaseError

from attachments.models import SentenceVector

logger = logging.getLogger(__name__)


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def embed_weighed(
    embedder: Any, question: str, items: Sequence[tuple[int | None, str]], *, timeout: float
) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors of `question` and of each (chunk id or None, sentence) in `items`, as
    float32 arrays; stored ones are read, the rest embedded (and stored when of a chunk)."""
    asked, out = embed_texts(embedder, [question], items, timeout=timeout)
    return asked[0], out


def embed_texts(
    embedder: Any,
    texts: Sequence[str],
    items: Sequence[tuple[int | None, str]],
    *,
    timeout: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Vectors of `texts` (embedded each time) and of each (chunk id or None, sentence) in
    `items` (stored ones read, the rest embedded and stored when of a chunk), as float32
    arrays, in one request to the embedder."""
    model = embedder.model_name
    keys = [(chunk, digest(text)) if chunk is not None else None for chunk, text in items]
    stored: dict[tuple[int, str], np.ndarray] = {}
    chunk_ids = {k[0] for k in keys if k is not None}
    if chunk_ids:
        rows = SentenceVector.objects.filter(chunk_id__in=chunk_ids, model=model).values_list(
            "chunk_id", "digest", "embedding"
        )
        stored = {(c, d): np.frombuffer(bytes(e), dtype=np.float32) for c, d, e in rows}
    missing = [i for i, k in enumerate(keys) if k is None or k not in stored]
    fresh = embedder.embed([*texts, *(items[i][1] for i in missing)], timeout=timeout)
    vectors = np.asarray(fresh, dtype=np.float32)
    dims = vectors.shape[1]
    out = np.zeros((len(items), dims), dtype=np.float32)
    new: list[SentenceVector] = []
    for row, i in enumerate(missing, start=len(texts)):
        out[i] = vectors[row]
        key = keys[i]
        if key is not None:
            new.append(
                SentenceVector(
                    chunk_id=key[0], digest=key[1], model=model, embedding=vectors[row].tobytes()
                )
            )
    for i, key in enumerate(keys):
        if key is not None and key in stored:
            vector = stored[key]
            if vector.shape[0] != dims:  # left by a model of another size: embed again
                out[i] = np.asarray(embedder.embed([items[i][1]], timeout=timeout)[0])
            else:
                out[i] = vector
    if new:
        try:  # a chunk deleted meanwhile (reindexed) or a concurrent answer: no matter
            SentenceVector.objects.bulk_create(new, ignore_conflicts=True)
        except DatabaseError:
            logger.warning("could not keep %s sentence vectors", len(new), exc_info=True)
    return vectors[: len(texts)], out


def similarities(question: np.ndarray, sentences: np.ndarray) -> list[float]:
    """Cosine similarity of each row of `sentences` to `question`."""
    norms = np.linalg.norm(sentences, axis=1) * (np.linalg.norm(question) or 1.0)
    dots = sentences @ question
    return [float(d / n) if n else 0.0 for d, n in zip(dots, norms, strict=True)]
