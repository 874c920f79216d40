"""Hybrid ranking of a handful of short texts held in memory (a conversation's messages, a
notebook's memories): shared content words (BM25-like, stemmed in the query's language;
Chinese cut with jieba; core.language) fused by reciprocal rank with embedding
similarity. For corpora that live in the database and grow, use search.retrieval."""

from __future__ import annotations

import math
from collections import Counter

from core.embeddings import get_embedder, warming_up
from core.language import content_terms, detect_language

RRF_K = 60


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
    # One language for both sides, the query's (or the items' when it is too short to tell):
    # words stemmed by different stemmers never match.
    language = detect_language(query) or detect_language(" ".join(text for _, text, _ in items))
    fused: dict[int, float] = {}
    lexical = _bm25(
        content_terms(query, language), [content_terms(text, language) for _, text, _ in items]
    )
    ranked = sorted(
        ((s, pk) for s, (pk, _, _) in zip(lexical, items, strict=True) if s > 0), reverse=True
    )
    for rank, (_, pk) in enumerate(ranked, start=1):
        fused[pk] = fused.get(pk, 0.0) + 1 / (RRF_K + rank)
    if any(vector for _, _, vector in items):
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
