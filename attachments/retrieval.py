"""Retrieval over the chunks a user may see: BM25 in SQL, pgvector HNSW, reciprocal rank fusion.

Groundwork for the hybrid retrieval issue: documents only for now (notes, rerankers, the search
page and API come with it). Every query is scoped in SQL through the notes selectors, never
post-filtered.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from django.db import connection, transaction

from attachments.language import segment_for_search
from attachments.models import DocumentChunk, NoteAttachment
from notebook.textutil import cjk_ratio
from notes.selectors import visible_notes

if TYPE_CHECKING:
    from notebook.types import User

Mode = Literal["lexical", "vector", "hybrid"]
K1 = 1.2
B = 0.75
RRF_K = 60
MAX_QUERY_CHARS = 2000


@dataclass
class Scope:
    """What to search within; None means everything the user may see."""

    notebook_id: int | None = None
    note_id: int | None = None
    attachment_ids: list[int] | None = None


@dataclass
class Hit:
    chunk: DocumentChunk
    lexical: float | None = None
    lexical_rank: int | None = None
    vector: float | None = None  # cosine similarity
    vector_rank: int | None = None
    fused: float = 0.0


@dataclass
class SearchResult:
    hits: list[Hit]
    timings: dict[str, float] = field(default_factory=dict)


def scoped_attachments(*, user: User, scope: Scope) -> tuple[str, tuple[Any, ...]]:
    """SQL (and params) selecting (id, search_config) of the ready attachments in scope, built
    from the notes selector so that visibility has one definition."""
    notes = visible_notes(user=user).filter(trashed_at__isnull=True)
    if scope.notebook_id is not None:
        notes = notes.filter(notebook_id=scope.notebook_id)
    if scope.note_id is not None:
        notes = notes.filter(pk=scope.note_id)
    attachments = NoteAttachment.objects.filter(note__in=notes, status=NoteAttachment.Status.READY)
    if scope.attachment_ids is not None:
        attachments = attachments.filter(pk__in=scope.attachment_ids)
    sql, params = attachments.values("id", "search_config").query.sql_with_params()
    return sql, tuple(params)


_LEXICAL_SQL = """
WITH scope AS MATERIALIZED ({scope}),
stats AS (
    SELECT count(*) AS n, coalesce(avg(c.token_len), 0) AS avgdl
    FROM attachments_documentchunk c WHERE c.attachment_id IN (SELECT id FROM scope)
),
configs AS (SELECT DISTINCT search_config AS cfg FROM scope),
terms AS (  -- the query's lexemes in each text search configuration present in the scope
    SELECT cfg, unnest(tsvector_to_array(to_tsvector(
        cfg::regconfig, CASE WHEN cfg = 'simple' THEN unaccent(%s) ELSE %s END
    ))) AS lexeme
    FROM configs
),
queries AS (
    SELECT cfg, array_agg(lexeme) AS lexemes,
           array_to_string(array_agg(quote_literal(lexeme)), ' | ')::tsquery AS tsq
    FROM terms GROUP BY cfg
),
matches AS (  -- candidates come from the GIN index: chunks holding any query lexeme
    SELECT c.id, c.token_len, q.cfg, c.search_vector, q.lexemes
    FROM queries q
    JOIN scope s ON s.search_config = q.cfg
    JOIN attachments_documentchunk c ON c.attachment_id = s.id AND c.search_vector @@ q.tsq
),
tf AS (
    SELECT m.id, m.cfg, u.lexeme, coalesce(array_length(u.positions, 1), 1) AS tf, m.token_len
    FROM matches m, unnest(m.search_vector) AS u
    WHERE u.lexeme = ANY(m.lexemes)
),
df AS (SELECT cfg, lexeme, count(*) AS df FROM tf GROUP BY cfg, lexeme)
SELECT tf.id,
       sum(
           ln(1 + (st.n - df.df + 0.5) / (df.df + 0.5))
           * tf.tf * ({k1} + 1)
           / (tf.tf + {k1} * (1 - {b} + {b} * tf.token_len / greatest(st.avgdl, 1)))
       ) AS score
FROM tf JOIN df USING (cfg, lexeme) CROSS JOIN stats st
GROUP BY tf.id
ORDER BY score DESC, tf.id
LIMIT %s
"""


def lexical(*, user: User, query: str, scope: Scope, limit: int) -> list[tuple[int, float]]:
    """(chunk id, BM25 score), best first: IDF from document frequencies within the scope,
    term frequency from the tsvector's positions, length normalisation by token_len.

    The query's stop words are dropped first: a chunk indexed with `simple` (e.g. the English
    licence inside a Chinese manual) keeps its stop words, and "the" or "how" would otherwise
    look rare and outweigh every real term."""
    text = _clean(query)
    if not text:
        return []
    if cjk_ratio(text) > 0:
        # Chinese chunks were indexed as jieba words; the query must be cut the same way.
        text = segment_for_search(text, "zh")
    text = _without_stop_words(text)
    if not text:
        return []
    scope_sql, scope_params = scoped_attachments(user=user, scope=scope)
    sql = _LEXICAL_SQL.format(scope=scope_sql, k1=float(K1), b=float(B))
    with connection.cursor() as cursor:
        cursor.execute(sql, [*scope_params, text, text, limit])
        return [(int(pk), float(score)) for pk, score in cursor.fetchall()]


def vector(
    *, user: User, embedding: list[float], scope: Scope, limit: int
) -> list[tuple[int, float]]:
    """(chunk id, cosine similarity), best first, from the HNSW index. Iterative index scans
    (pgvector 0.8) keep going until `limit` rows survive the scope filter."""
    scope_sql, scope_params = scoped_attachments(user=user, scope=scope)
    sql = (
        f"WITH scope AS MATERIALIZED ({scope_sql}) "  # noqa: S608 - built by the ORM
        "SELECT c.id, 1 - (c.embedding <=> %s::vector) AS similarity "
        "FROM attachments_documentchunk c "
        "WHERE c.attachment_id IN (SELECT id FROM scope) AND c.embedding IS NOT NULL "
        "ORDER BY c.embedding <=> %s::vector LIMIT %s"
    )
    literal = "[" + ",".join(f"{v:.7g}" for v in embedding) + "]"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.ef_search = 100")
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute(sql, [*scope_params, literal, literal, limit])
        rows = [(int(pk), float(sim)) for pk, sim in cursor.fetchall()]
    # relaxed_order may return near-ties slightly out of order.
    return sorted(rows, key=lambda row: -row[1])


def _without_stop_words(text: str) -> str:
    """The query's words minus English and German stop words, as Postgres' parser splits them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT string_agg(token, ' ') FROM ts_debug('simple', %s) AS d "
            "WHERE d.lexemes IS NOT NULL "
            "AND ts_lexize('english_stem', d.token) <> '{}' "
            "AND ts_lexize('german_stem', d.token) <> '{}'",
            [text],
        )
        row = cursor.fetchone()
    return str(row[0] or "") if row else ""


def _clean(query: str) -> str:
    return " ".join(query.split())[:MAX_QUERY_CHARS]


def rrf(
    legs: dict[str, list[tuple[int, float]]], weights: dict[str, float] | None = None
) -> dict[int, float]:
    """Reciprocal rank fusion: each leg adds weight / (RRF_K + rank)."""
    fused: dict[int, float] = {}
    for name, ranked in legs.items():
        weight = (weights or {}).get(name, 1.0)
        for rank, (pk, _) in enumerate(ranked, start=1):
            fused[pk] = fused.get(pk, 0.0) + weight / (RRF_K + rank)
    return fused


def search(
    *,
    user: User,
    query: str,
    scope: Scope | None = None,
    limit: int = 10,
    mode: Mode = "hybrid",
    candidates: int = 50,
    weights: dict[str, float] | None = None,
) -> SearchResult:
    """Ranked chunks for `query` among what `user` may see, with every score and timings."""
    scope = scope or Scope()
    timings: dict[str, float] = {}
    legs: dict[str, list[tuple[int, float]]] = {}
    depth = max(limit, candidates) if mode == "hybrid" else limit
    if mode in ("lexical", "hybrid"):
        started = time.perf_counter()
        legs["lexical"] = lexical(user=user, query=query, scope=scope, limit=depth)
        timings["lexical"] = time.perf_counter() - started
    if mode in ("vector", "hybrid") and _clean(query):
        from notebook.embeddings import get_embedder

        started = time.perf_counter()
        (embedding,) = get_embedder().embed([_clean(query)])
        timings["embed_query"] = time.perf_counter() - started
        started = time.perf_counter()
        legs["vector"] = vector(user=user, embedding=embedding, scope=scope, limit=depth)
        timings["vector"] = time.perf_counter() - started
    started = time.perf_counter()
    fused = rrf(legs, weights)
    order = sorted(fused, key=lambda pk: -fused[pk])[:limit]
    chunks = DocumentChunk.objects.select_related("attachment__note__notebook").in_bulk(order)
    hits: dict[int, Hit] = {pk: Hit(chunks[pk], fused=fused[pk]) for pk in order if pk in chunks}
    for rank, (pk, score) in enumerate(legs.get("lexical", []), start=1):
        if pk in hits:
            hits[pk].lexical, hits[pk].lexical_rank = score, rank
    for rank, (pk, score) in enumerate(legs.get("vector", []), start=1):
        if pk in hits:
            hits[pk].vector, hits[pk].vector_rank = score, rank
    timings["fuse"] = time.perf_counter() - started
    return SearchResult([hits[pk] for pk in order if pk in hits], timings)
