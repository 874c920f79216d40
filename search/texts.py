"""Hybrid ranking of a handful of short texts held in memory (a conversation's messages, a
notebook's memories): shared content words (BM25-like, stemmed; Chinese cut with jieba) fused
by reciprocal rank with embedding similarity. For corpora that live in the database and grow,
use search.retrieval."""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import cache
from typing import Any

from notebook.textutil import cjk_ratio

RRF_K = 60
_STOP_TEXT = (
    "a an and are as at be but by can could do does did for from had has have how i if in into "
    "is it its me my no not of on or our so than that the then there these they this to was we "
    "what when where which who whom why will with would you your about should may might must "
    "der die das und ist ein eine zu von mit wie was welche welcher den dem des im auf für"
)
STOP_WORDS = frozenset(_STOP_TEXT.split())


@cache
def _stemmer() -> Any:
    import Stemmer

    return Stemmer.Stemmer("english")


def content_terms(text: str) -> list[str]:
    """The content words of a text, stemmed and lower-cased, in order (Chinese cut into words
    with jieba)."""
    if cjk_ratio(text) > 0.1:
        import jieba

        jieba.setLogLevel(60)
        words = [w.strip().lower() for w in jieba.cut_for_search(text)]
        return [w for w in words if w and re.search(r"\w", w) and w not in STOP_WORDS]
    words = [w for w in re.findall(r"\w+", text.lower()) if len(w) > 1 and w not in STOP_WORDS]
    return list(_stemmer().stemWords(words))


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def _bm25(query: list[str], docs: list[list[str]]) -> list[float]:
    k1, b = 1.2, 0.75
    n = len(docs)
    avg = sum(len(d) for d in docs) / n if n else 0.0
    df = Counter(t for d in docs for t in set(d))
    scores = []
    for d in docs:
        tf = Counter(d)
        score = 0.0
        for t in set(query):
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                norm = tf[t] + k1 * (1 - b + b * len(d) / (avg or 1))
                score += idf * tf[t] * (k1 + 1) / norm
        scores.append(score)
    return scores


def hybrid_rank(
    query: str,
    items: list[tuple[int, str, list[float]]],
    *,
    limit: int,
    query_vector: list[float] | None = None,
) -> list[int]:
    """Ids of the `limit` items (id, text, embedding or []) most relevant to `query`: BM25 over
    their content words and cosine similarity, fused by reciprocal rank. Items matching on
    neither side are left out."""
    if not items:
        return []
    fused: dict[int, float] = {}
    lexical = _bm25(content_terms(query), [content_terms(text) for _, text, _ in items])
    ranked = sorted(
        ((s, pk) for s, (pk, _, _) in zip(lexical, items, strict=True) if s > 0), reverse=True
    )
    for rank, (_, pk) in enumerate(ranked, start=1):
        fused[pk] = fused.get(pk, 0.0) + 1 / (RRF_K + rank)
    if any(vector for _, _, vector in items):
        from notebook.embeddings import get_embedder, warming_up

        # Right after the server starts the model may still be loading: lexical only, no wait.
        if query_vector is None and not warming_up():
            try:
                (query_vector,) = get_embedder().embed([query])
            except Exception:  # lexical only
                query_vector = None
        if query_vector is not None:
            similar = sorted(
                ((cosine(query_vector, v), pk) for pk, _, v in items if v), reverse=True
            )
            for rank, (similarity, pk) in enumerate(similar, start=1):
                if similarity > 0.2:
                    fused[pk] = fused.get(pk, 0.0) + 1 / (RRF_K + rank)
    return [pk for pk, _ in sorted(fused.items(), key=lambda kv: (-kv[1], -kv[0]))[:limit]]
