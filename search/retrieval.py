"""Retrieval over what a user may see: document chunks and notes, by BM25 computed in SQL and
by pgvector HNSW, fused (reciprocal rank fusion or min-max scores), optionally diversified
across sources and reranked. Every query is scoped in SQL through the notes selectors, never
post-filtered. See docs/retrieval.md.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, cast

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils.translation import gettext_noop

from attachments.models import ChunkVector, DocumentChunk, NoteAttachment
from core import metrics, model_budget
from core import rerank as reranking
from core.embeddings import EmbeddingError, get_embedder, warming_up
from core.language import detect_language, segment_for_search
from core.textutil import cjk_ratio
from intelligence.models import known_type_q
from notes.indexing import note_search_text
from notes.models import Note, NoteVector
from notes.selectors import visible_notes
from search import bm25
from search.fusion import anchor, minmax, rrf

if TYPE_CHECKING:
    from core.types import User

Mode = Literal["lexical", "vector", "hybrid"]  # passages; "documents" is search_documents
Fusion = Literal["rrf", "minmax"]
Kind = Literal["document", "note"]
Key = tuple[Kind, int]  # ("document", chunk id) or ("note", note id)
MAX_QUERY_CHARS = 2000
EF_SEARCH = 400  # recall@10 0.97 vs 0.85 at 100 on 100k chunks (bench), +1 ms
WINDOWS_PER_HIT = 3  # vector rows fetched per wanted hit: a long chunk has several windows
WINDOWS_PER_DOCUMENT = 10  # two-level search: nearest windows fetched per wanted document
DOCUMENT_CANDIDATES_PER_KEPT = 3  # two-level search: documents ranked per leg, per one kept
# What a search without its vector leg says, in English (the API's `info.degraded`); the
# search page shows it translated (gettext_noop marks the known reasons for the catalogues).
DEGRADED = gettext_noop("vector search unavailable: %(reason)s")
WARMING_UP = gettext_noop("the search model is still loading (the server has just started)")
logger = logging.getLogger(__name__)


@dataclass
class Scope:
    """What to search within; None means everything the user may see. Notes are searched
    beside documents unless `include_notes` is off or `attachment_ids` names documents (and
    `note_ids` does not name notes); `include_documents` off searches notes only. Ids only
    narrow: whatever they name is still filtered by what the user may see."""

    notebook_id: int | None = None
    note_id: int | None = None
    attachment_ids: list[int] | None = None
    include_notes: bool = True
    include_documents: bool = True
    note_ids: list[int] | None = None  # the notes searched as passages (chosen sources)
    # Only documents whose profile has this type (intelligence's SourceProfile); notes have none.
    doc_type: str | None = None
    # The second level of a two-level search: only these documents' passages (those the first
    # level ranked best); unlike `attachment_ids` it leaves which notes are searched alone.
    top_documents: list[int] | None = None

    @property
    def searches_notes(self) -> bool:
        if not self.include_notes or self.doc_type:
            return False
        return self.note_ids is not None or self.attachment_ids is None


@dataclass
class Hit:
    kind: Kind
    note: Note
    chunk: DocumentChunk | None = None  # set for documents
    lexical: float | None = None  # BM25
    lexical_rank: int | None = None
    vector: float | None = None  # cosine similarity (best window)
    vector_rank: int | None = None
    fused: float = 0.0
    rerank: float | None = None

    @property
    def key(self) -> Key:
        return (self.kind, self.chunk.pk if self.chunk else self.note.pk)

    @property
    def attachment(self) -> NoteAttachment | None:
        return self.chunk.attachment if self.chunk else None

    @property
    def text(self) -> str:
        return (
            self.chunk.content if self.chunk else note_search_text(self.note.title, self.note.body)
        )

    @property
    def source(self) -> tuple[str, int]:
        """The document (or note) a hit comes from, for diversity."""
        return ("attachment", self.chunk.attachment_id) if self.chunk else ("note", self.note.pk)


@dataclass
class SearchResult:
    hits: list[Hit]
    timings: dict[str, float] = field(default_factory=dict)
    # How the ranking was made: query_language, vector_weight, fusion, rerank backend/fallback.
    info: dict[str, Any] = field(default_factory=dict)
    # Wall time of the whole search (stages overlap: the query is embedded during BM25).
    total: float = 0.0
    # Why the vector leg was left out (English; info["degraded"] holds it with DEGRADED), or "".
    degraded_reason: str = ""
    # The "documents" mode's results (search.documents.DocumentHit), one per source; `hits`
    # stays empty then.
    documents: list[Any] = field(default_factory=list)


def _sql(queryset: Any) -> tuple[str, tuple[Any, ...]]:
    sql, params = queryset.query.sql_with_params()
    return sql, tuple(params)


def _scoped_notes(*, user: User, scope: Scope) -> Any:
    notes = visible_notes(user=user).filter(trashed_at__isnull=True)
    if scope.notebook_id is not None:
        notes = notes.filter(notebook_id=scope.notebook_id)
    if scope.note_id is not None:
        notes = notes.filter(pk=scope.note_id)
    return notes


def scoped_attachments(*, user: User, scope: Scope) -> tuple[str, tuple[Any, ...]]:
    """SQL (and params) selecting (id, search_config) of the searchable attachments in scope
    (ready, or processing with their words indexed: see NoteAttachment.searchable_q), built
    from the notes selector so that visibility has one definition."""
    attachments = NoteAttachment.objects.filter(
        NoteAttachment.searchable_q(), note__in=_scoped_notes(user=user, scope=scope)
    )
    wanted = scope.attachment_ids if scope.include_documents else []
    if wanted is not None:
        # An empty list means no files (pk__in=[] would make the ORM refuse to compile SQL).
        attachments = attachments.filter(pk__in=wanted or [-1])
    if scope.top_documents is not None:
        attachments = attachments.filter(pk__in=scope.top_documents or [-1])
    # A type filter matches the types as shown: a confident (or the owner's) type; Other is
    # every source without one.
    if scope.doc_type == "other":
        attachments = attachments.exclude(known_type_q("profile__"))
    elif scope.doc_type:
        attachments = attachments.filter(
            known_type_q("profile__"), profile__doc_type=scope.doc_type
        )
    return _sql(attachments.values("id", "search_config"))


def scoped_notes(*, user: User, scope: Scope) -> tuple[str, tuple[Any, ...]]:
    """SQL (and params) selecting (id, search_config) of the notes searched as passages."""
    notes = _scoped_notes(user=user, scope=scope)
    if not scope.searches_notes:
        notes = notes.filter(pk__isnull=True)  # none: keeps the SQL valid
    elif scope.note_ids is not None:
        notes = notes.filter(pk__in=scope.note_ids or [-1])
    return _sql(notes.values("id", "search_config"))


def lexical(*, user: User, query: str, scope: Scope, limit: int) -> list[tuple[Key, float]]:
    """(key, BM25 score), best first, over the chunks and notes in scope: IDF from document
    frequencies within the scope, term frequency from the tsvector's positions, length
    normalisation by token_len.

    The query's stop words are dropped first: a chunk indexed with `simple` (e.g. the English
    licence inside a Chinese manual) keeps its stop words, and "the" or "how" would otherwise
    look rare and outweigh every real term."""
    text = _keyword_text(query)
    if not text:
        return []
    found = bm25.rank(
        text=text,
        scope=scoped_attachments(user=user, scope=scope),
        note_scope=scoped_notes(user=user, scope=scope),
        limit=limit,
    )
    return [((cast("Kind", kind), pk), score) for (kind, pk), score in found]


def vector(
    *, user: User, embedding: list[float], scope: Scope, limit: int
) -> list[tuple[Key, float]]:
    """(key, cosine similarity of the best window), best first, from the HNSW indexes of
    chunk and note vectors. Iterative index scans (pgvector 0.8) keep going until enough rows
    survive the scope filter, so a query scoped to one note still fills its limit."""
    literal = "[" + ",".join(f"{v:.7g}" for v in embedding) + "]"
    scope_sql, scope_params = scoped_attachments(user=user, scope=scope)
    note_sql, note_params = scoped_notes(user=user, scope=scope)
    legs = (
        ("document", ChunkVector._meta.db_table, "chunk_id", "attachment_id", scope_sql,
         scope_params),
        ("note", NoteVector._meta.db_table, "note_id", "note_id", note_sql, note_params),
    )  # fmt: skip
    rows: list[tuple[Key, float]] = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL hnsw.ef_search = {EF_SEARCH}")
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        for kind, table, owner, scoped_by, sql, params in legs:
            if kind == "note" and not scope.searches_notes:
                continue
            cursor.execute(
                f"WITH scope AS MATERIALIZED ({sql}) "  # noqa: S608 - built by the ORM
                f"SELECT owner, max(similarity) FROM ("
                f"  SELECT v.{owner} AS owner, 1 - (v.embedding <=> %s::vector) AS similarity"
                f"  FROM {table} v WHERE v.{scoped_by} IN (SELECT id FROM scope)"
                f"  ORDER BY v.embedding <=> %s::vector LIMIT %s"
                ") windows GROUP BY owner ORDER BY 2 DESC LIMIT %s",
                [*params, literal, literal, limit * WINDOWS_PER_HIT, limit],
            )
            rows += [((kind, int(pk)), float(sim)) for pk, sim in cursor.fetchall()]  # type: ignore[misc]
    return sorted(rows, key=lambda row: -row[1])[:limit]


def phrase_occurs(*, user: User, phrase: str, scope: Scope) -> bool:
    """Whether any passage in scope holds every word of `phrase` (as its text search
    configuration reads them): used to notice questions about things the sources never name."""
    text = _clean(phrase)
    if not text:
        return False
    scope_sql, scope_params = scoped_attachments(user=user, scope=scope)
    note_sql, note_params = scoped_notes(user=user, scope=scope)
    # The scopes are SQL built by the ORM; the phrase is a parameter.
    scopes = f"WITH scope AS MATERIALIZED ({scope_sql}), note_scope AS MATERIALIZED ({note_sql}) "
    query = scopes + (  # noqa: S608
        "SELECT EXISTS (SELECT 1 FROM scope s JOIN attachments_documentchunk c "
        "  ON c.attachment_id = s.id "
        "  AND c.search_vector @@ plainto_tsquery(s.search_config::regconfig, %s)) "
        "OR EXISTS (SELECT 1 FROM note_scope ns JOIN notes_note n ON n.id = ns.id "
        "  AND n.search_vector @@ plainto_tsquery(ns.search_config::regconfig, %s))"
    )
    with connection.cursor() as cursor:
        cursor.execute(query, [*scope_params, *note_params, text, text])
        row = cursor.fetchone()
    return bool(row and row[0])


def _keyword_text(query: str) -> str:
    """The query as the keyword index reads it: Chinese cut into words as ingestion cut the
    chunks (jieba), stop words dropped."""
    text = _clean(query)
    if text and cjk_ratio(text) > 0:
        text = segment_for_search(text, "zh")
    return _without_stop_words(text) if text else ""


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


def vector_weight(query: str) -> tuple[float, str]:
    """The vector leg's fusion weight for this query, and the query's detected language.

    An embedding model ranks text in languages it was not trained on barely better than
    chance (all-MiniLM-L6-v2 is English-only), so the vector leg does not vote on queries in
    other languages. EMBEDDING_LANGUAGES lists the languages the model covers ("*" = all);
    a query too short to tell keeps the vector leg."""
    language = detect_language(query)
    covered = settings.EMBEDDING_LANGUAGES
    if "*" in covered or not language or language in covered:
        return settings.SEARCH_VECTOR_WEIGHT, language
    return 0.0, language


def closeness(
    *,
    user: User,
    query: str,
    scope: Scope,
    context_vector: list[float],
    context_weight: float | None = None,
) -> tuple[float, float] | None:
    """How close the best passage in scope comes to `query` alone, and to `query` moved towards
    `context_vector` (`in_context`): two cosine similarities from one embedding of the query
    and two nearest-neighbour lookups. None when the query cannot be embedded now (the model
    still loading, or failing) or nothing in scope has a vector."""
    text = _clean(query)
    if not text or warming_up():
        return None
    try:
        embedding, _ = _embed_query(text)
        weight = settings.SEARCH_CONTEXT_WEIGHT if context_weight is None else context_weight
        alone = vector(user=user, embedding=embedding, scope=scope, limit=1)
        together = vector(user=user, embedding=in_context(embedding, context_vector, weight),
                          scope=scope, limit=1)  # fmt: skip
    except Exception as exc:
        logger.warning("could not weigh the conversation: %s", _why(exc))
        return None
    if not alone or not together:
        return None
    return alone[0][1], together[0][1]


def in_context(query: list[float], context: list[float], weight: float) -> list[float]:
    """The query's vector moved towards its conversation: q + weight·c, both unit length,
    normalised again. At weight 1 a passage as close to the turn before as to the question
    ranks with one close to the question alone; 0 leaves the query as it is."""
    q, c = _unit(query), _unit(context)
    if len(q) != len(c) or weight <= 0:
        return query
    return _unit([a + weight * b for a, b in zip(q, c, strict=True)])


def _unit(values: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values] if norm else list(values)


def document_vector(
    *, user: User, embedding: list[float], scope: Scope, limit: int
) -> list[tuple[int, float]]:
    """(attachment id, cosine similarity of its best window), best first: the documents of
    the windows nearest the query in the chunk vectors' HNSW index, scoped in SQL like
    `vector`."""
    literal = "[" + ",".join(f"{v:.7g}" for v in embedding) + "]"
    scope_sql, scope_params = scoped_attachments(user=user, scope=scope)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL hnsw.ef_search = {EF_SEARCH}")
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute(
            f"WITH scope AS MATERIALIZED ({scope_sql}) "  # noqa: S608 - built by the ORM
            "SELECT attachment_id, max(similarity) FROM ("
            "  SELECT v.attachment_id, 1 - (v.embedding <=> %s::vector) AS similarity"
            f"  FROM {ChunkVector._meta.db_table} v"
            "  WHERE v.attachment_id IN (SELECT id FROM scope)"
            "  ORDER BY v.embedding <=> %s::vector LIMIT %s"
            ") windows GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT %s",
            [*scope_params, literal, literal, limit * WINDOWS_PER_DOCUMENT, limit],
        )
        return [(int(pk), float(sim)) for pk, sim in cursor.fetchall()]


def documents_in_scope(*, user: User, scope: Scope, at_most: int) -> int:
    """How many documents the scope holds, counted up to `at_most`."""
    sql, params = scoped_attachments(user=user, scope=scope)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM ({sql} LIMIT %s) s", [*params, at_most])  # noqa: S608
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def top_documents(
    *,
    user: User,
    query: str,
    scope: Scope,
    keep: int,
    embedding: Callable[[], list[float] | None],
    vector_weight_of_query: float,
    extra_queries: list[str] | None = None,
) -> tuple[list[int], dict[str, list[tuple[int, float]]]]:
    """The first level of a two-level search: the `keep` documents in scope that best match
    `query`, by reciprocal rank fusion of document-level BM25 (`bm25.rank_documents`, per
    query: the original and its extra forms) and the documents of the windows nearest the
    query's vector (`document_vector`; `embedding()` gives it, or None without one: it is
    asked for after the keyword legs, which run while the query is embedded), weighted like
    the passage legs. Returns the ids and the legs."""
    depth = keep * DOCUMENT_CANDIDATES_PER_KEPT
    scope_sql = scoped_attachments(user=user, scope=scope)
    legs: dict[str, list[tuple[int, float]]] = {}
    weights: dict[str, float] = {}
    for n, text in enumerate([query, *(extra_queries or [])]):
        words = _keyword_text(text)
        if words:
            name = "lexical" if n == 0 else f"lexical:{n}"
            legs[name] = bm25.rank_documents(text=words, scope=scope_sql, limit=depth)
            weights[name] = settings.SEARCH_LEXICAL_WEIGHT
    query_vector = embedding() if vector_weight_of_query else None
    if query_vector is not None:
        legs["vector"] = document_vector(
            user=user, embedding=query_vector, scope=scope, limit=depth
        )
        weights["vector"] = vector_weight_of_query
    fused = rrf(legs, weights)
    return sorted(fused, key=lambda pk: (-fused[pk], pk))[:keep], legs


def anchored_scope(scope: Scope, anchors: list[int]) -> Scope:
    """`scope` narrowed to the anchored documents (still filtered by the user: ids only
    narrow), without notes."""
    wanted = [a for a in anchors if scope.attachment_ids is None or a in scope.attachment_ids]
    return Scope(notebook_id=scope.notebook_id, note_id=scope.note_id, attachment_ids=wanted,
                 include_notes=False, include_documents=scope.include_documents,
                 doc_type=scope.doc_type)  # fmt: skip


def diversify(hits: list[Hit]) -> list[Hit]:
    """Round-robin across sources (documents and notes) in order of their best hit, so a
    broad question sees several documents before a third passage of the first one."""
    by_source: dict[tuple[str, int], list[Hit]] = defaultdict(list)
    for hit in hits:
        by_source[hit.source].append(hit)
    queues = list(by_source.values())
    out: list[Hit] = []
    while queues:
        out += [queue.pop(0) for queue in queues]
        queues = [queue for queue in queues if queue]
    return out


def search(
    *,
    user: User,
    query: str,
    scope: Scope | None = None,
    limit: int = 10,
    mode: Mode = "hybrid",
    candidates: int = 50,
    fusion: Fusion | None = None,
    weights: dict[str, float] | None = None,
    diversity: bool = False,
    rerank: bool | None = None,
    anchors: list[int] | None = None,
    anchor_boost: float | None = None,
    anchor_pages: list[tuple[int, int]] | None = None,
    context_vector: list[float] | None = None,
    context_weight: float | None = None,
    context_text: str = "",
    extra_queries: list[str] | None = None,
    budgeted: bool = False,
    two_level: bool = True,
) -> SearchResult:
    """Ranked passages (document chunks and notes) for `query` among what `user` may see,
    with every score, the timings of each stage and how the ranking was made.

    `fusion` defaults to SEARCH_FUSION; `weights` ({"lexical": …, "vector": …}) override the
    per-leg weights; `rerank` defaults to whether a RERANKER is configured. `anchors`
    (attachment ids, for a follow-up question: the documents behind the previous answer) get
    `anchor_boost` (default SEARCH_ANCHOR_BOOST) added to their min-max normalised fused score
    (source anchoring, see `anchor`); passages on or within SEARCH_ANCHOR_PAGE_WINDOW pages of
    `anchor_pages` ((attachment id, page): the pages the previous answer cited) get
    SEARCH_ANCHOR_PAGE_BOOST more. `context_vector` (a follow-up's conversation: the embedding
    of the turn before, chat.reformulation) moves the vector leg's query towards it by
    `context_weight` (default SEARCH_CONTEXT_WEIGHT; see `in_context`), and with `anchors` the
    same vector also searches the anchored documents alone, as one more vector leg, so that
    their passages nearest the conversation are candidates. The lexical leg keeps the query's
    own words; `context_text` (the turn before's words) is one more lexical leg, weighted
    SEARCH_CONTEXT_LEXICAL_WEIGHT of it. An anchored search fuses by min-max whatever
    SEARCH_FUSION says (see the comment at the fusion). `extra_queries` (the
    query's English translation and expansion, search.expansion) are searched too, each leg
    beside the original's, and fused with them. `budgeted`: the rerank draws on the user's
    model-call budget (the search page and API; the chat agent's searches are under the chat
    rate limit), and the fused order stays when it is spent. `two_level`: a hybrid search over
    more than SEARCH_TWO_LEVEL_MIN_DOCUMENTS documents (and more than it keeps) first ranks
    the documents (`top_documents`) and searches the passages of the best
    SEARCH_TWO_LEVEL_DOCUMENTS of them (and of the anchored ones), notes as the scope says."""

    scope = scope or Scope()
    fusion = fusion or cast("Fusion", settings.SEARCH_FUSION)
    timings: dict[str, float] = {}
    info: dict[str, Any] = {"mode": mode}
    legs: dict[str, list[tuple[Key, float]]] = {}
    if rerank is None:
        rerank = reranking.reranker_enabled()
    # Fusion, reranking and anchoring re-order a deeper pool of candidates than is shown.
    depth = max(limit, candidates) if mode == "hybrid" or rerank or anchors else limit
    search_started = time.perf_counter()
    leg_weights = {"lexical": settings.SEARCH_LEXICAL_WEIGHT, "vector": 1.0}
    embedding: Future[tuple[list[float], float]] | None = None
    degraded_reason = ""
    if mode in ("vector", "hybrid") and _clean(query):
        if warming_up():
            # The web process is still loading the model (start-up): never wait for it (nor
            # for the language identifier, which only weighs the vector leg).
            info["warming_up"] = True
            degraded_reason = WARMING_UP
            info["degraded"] = DEGRADED % {"reason": degraded_reason}
        else:
            leg_weights["vector"], info["query_language"] = vector_weight(_clean(query))
            # The model embeds the query (torch, GIL released) while Postgres runs BM25.
            embedding = _embedding_pool().submit(_embed_query, _clean(query))
    if two_level and mode == "hybrid":
        scope = _two_level(user, query, scope, embedding, leg_weights["vector"], extra_queries,
                           anchors, timings, info)  # fmt: skip
    if mode in ("lexical", "hybrid"):
        started = time.perf_counter()
        legs["lexical"] = lexical(user=user, query=query, scope=scope, limit=depth)
        timings["lexical"] = time.perf_counter() - started
    if embedding is not None:
        # A failing embedder or vector query costs the vector leg, never the search.
        try:
            vector_of_query, timings["embed_query"] = embedding.result(_query_wait())
            started = time.perf_counter()
            if context_vector is not None:
                weight = (
                    settings.SEARCH_CONTEXT_WEIGHT if context_weight is None else context_weight
                )
                vector_of_query = in_context(vector_of_query, context_vector, weight)
                info["context"] = {"weight": weight}
            legs["vector"] = vector(user=user, embedding=vector_of_query, scope=scope, limit=depth)
            if context_vector is not None and anchors:
                within = anchored_scope(scope, anchors)
                legs["vector:context"] = vector(user=user, embedding=vector_of_query,
                                                scope=within, limit=depth)  # fmt: skip
                leg_weights["vector:context"] = leg_weights["vector"]
            timings["vector"] = time.perf_counter() - started
        except Exception as exc:
            degraded_reason = _why(exc)
            info["degraded"] = DEGRADED % {"reason": degraded_reason}
            logger.warning("search without its vector leg: %s", degraded_reason)
    if context_text and mode in ("lexical", "hybrid") and settings.SEARCH_CONTEXT_LEXICAL_WEIGHT:
        started = time.perf_counter()
        legs["lexical:context"] = lexical(user=user, query=context_text, scope=scope, limit=depth)
        leg_weights["lexical:context"] = (
            settings.SEARCH_CONTEXT_LEXICAL_WEIGHT * leg_weights["lexical"]
        )
        timings["lexical_context"] = time.perf_counter() - started
    if mode != "hybrid":
        leg_weights = {"lexical": 1.0, "vector": 1.0}  # one leg: its own order
    leg_weights.update(weights or {})
    if extra_queries:
        started = time.perf_counter()
        _extra_legs(user, extra_queries, scope, mode, depth, legs, leg_weights, info)
        timings["expanded_queries"] = time.perf_counter() - started

    started = time.perf_counter()
    # Anchoring adds its boost to the fused scores normalised over the candidates; RRF's are
    # ranks, which make the best passage of a search that finds nothing look as strong as the
    # best of one that finds its answer, so an anchored search fuses the scores themselves
    # (min-max), and a strong passage of the question's own keeps its lead over the boost.
    fused = (minmax if fusion == "minmax" or anchors else rrf)(legs, leg_weights)
    info.update(fusion=fusion if mode == "hybrid" else None, weights=leg_weights)
    if anchors:
        boost = settings.SEARCH_ANCHOR_BOOST if anchor_boost is None else anchor_boost
        pages = set(anchor_pages or [])
        fused = anchor(fused, set(anchors), boost, pages, settings.SEARCH_ANCHOR_PAGE_BOOST,
                       settings.SEARCH_ANCHOR_PAGE_WINDOW)  # fmt: skip
        info["anchors"] = {"attachment_ids": sorted(set(anchors)), "boost": boost}
        if pages:
            info["anchors"]["pages"] = sorted(pages)
    rerank_pool = max(limit, settings.RERANKER_TOP_N) if rerank else 0
    pool = max(limit, rerank_pool, candidates if diversity else 0)
    order = sorted(fused, key=lambda key: (-fused[key], key))[:pool]
    hits = _load(order, fused)
    for name, ranked_leg in legs.items():
        leg = name.split(":")[0]  # "lexical:1" is the lexical leg of the first extra query
        for rank, (key, score) in enumerate(ranked_leg, start=1):
            if key in hits and getattr(hits[key], leg) is None:
                setattr(hits[key], leg, score)
                setattr(hits[key], f"{leg}_rank", rank)
    ranked = [hits[key] for key in order if key in hits]
    timings["fuse"] = time.perf_counter() - started

    if rerank and ranked and budgeted and reranking.reranker_enabled():
        try:
            model_budget.charge(user_id=user.pk, feature="rerank")
        except model_budget.BudgetSpent as refused:
            model_budget.record(info, refused)
            info["rerank"] = {"backend": settings.RERANKER, "fallback": model_budget.FALLBACK}
            rerank = False
    if rerank and ranked:
        outcome = reranking.rerank(_clean(query), [hit.text for hit in ranked[:rerank_pool]])
        timings["rerank"] = outcome.seconds
        info["rerank"] = {"backend": outcome.backend, "fallback": outcome.fallback}
        if outcome.scores is not None:
            for hit, score in zip(ranked, outcome.scores, strict=False):
                hit.rerank = score
            head = sorted(ranked[:rerank_pool], key=lambda hit: -(hit.rerank or 0.0))
            ranked = head + ranked[rerank_pool:]
    if diversity:
        ranked = diversify(ranked)
    total = time.perf_counter() - search_started
    metrics.observe_search(timings, total, info, mode=mode)
    return SearchResult(ranked[:limit], timings, info, total, degraded_reason)


def _two_level(
    user: User,
    query: str,
    scope: Scope,
    embedding: Future[tuple[list[float], float]] | None,
    vector_weight_of_query: float,
    extra_queries: list[str] | None,
    anchors: list[int] | None,
    timings: dict[str, float],
    info: dict[str, Any],
) -> Scope:
    """`scope` narrowed to the documents the first level ranks best (plus the anchored ones),
    when it holds more than it keeps and more than SEARCH_TWO_LEVEL_MIN_DOCUMENTS; else as
    it is."""
    keep = int(settings.SEARCH_TWO_LEVEL_DOCUMENTS)
    if not keep or not scope.include_documents or not _clean(query):
        return scope
    started = time.perf_counter()
    threshold = max(int(settings.SEARCH_TWO_LEVEL_MIN_DOCUMENTS), keep)
    if documents_in_scope(user=user, scope=scope, at_most=threshold + 1) <= threshold:
        return scope

    def query_vector() -> list[float] | None:
        if embedding is None:
            return None
        try:
            return embedding.result(_query_wait())[0]
        except Exception:  # the passages' vector leg reports it
            return None

    kept, legs = top_documents(
        user=user,
        query=query,
        scope=scope,
        keep=keep,
        embedding=query_vector,
        vector_weight_of_query=vector_weight_of_query,
        extra_queries=extra_queries,
    )
    kept = sorted(set(kept) | set(anchors or []))
    timings["documents"] = time.perf_counter() - started
    # The documents whose passages were searched, and how many each first-level leg ranked.
    info["two_level"] = {
        "attachment_ids": kept,
        "legs": {name: len(leg) for name, leg in legs.items()},
    }
    return replace(scope, top_documents=kept)


def _extra_legs(
    user: User,
    queries: list[str],
    scope: Scope,
    mode: str,
    depth: int,
    legs: dict[str, list[tuple[Key, float]]],
    weights: dict[str, float],
    info: dict[str, Any],
) -> None:
    """The lexical and vector legs of each extra (English) query, as "lexical:N"/"vector:N",
    weighted like the original's legs (the vector leg at full weight: the queries are English).
    A failing vector leg is left out, as for the original query."""
    for n, text in enumerate(queries, start=1):
        if mode in ("lexical", "hybrid"):
            legs[f"lexical:{n}"] = lexical(user=user, query=text, scope=scope, limit=depth)
            weights[f"lexical:{n}"] = weights.get("lexical", 1.0)
        if mode in ("vector", "hybrid") and not info.get("warming_up") and "vector" in legs:
            try:
                embedding, _ = _embed_query(_clean(text))
                legs[f"vector:{n}"] = vector(user=user, embedding=embedding, scope=scope,
                                             limit=depth)  # fmt: skip
            except Exception as exc:
                logger.warning("extra query without its vector leg: %s", _why(exc))
                continue
            weights[f"vector:{n}"] = (
                settings.SEARCH_VECTOR_WEIGHT if mode == "hybrid" else weights.get("vector", 1.0)
            )
    info["queries"] = queries


_pools: dict[int, ThreadPoolExecutor] = {}


def _embedding_pool() -> ThreadPoolExecutor:
    """This process's pool: a forked child (a worker, a test server) inherits the parent's
    executor object but none of its threads, and work submitted to it would never run."""
    pid = os.getpid()
    if pid not in _pools:
        _pools.clear()
        _pools[pid] = ThreadPoolExecutor(max_workers=2, thread_name_prefix="embed-query")
    return _pools[pid]


def _embed_query(text: str) -> tuple[list[float], float]:
    started = time.perf_counter()
    timeout = float(settings.EMBEDDING_QUERY_TIMEOUT)
    (vector_of_query,) = get_embedder().embed([text], timeout=timeout)
    return vector_of_query, time.perf_counter() - started


def _query_wait() -> float | None:
    """How long a search waits for its query's vector: a remote server gets its request
    timeout and a little more (a server trickling bytes can outlast it); the local model has
    no timeout (its first call loads the model)."""
    if settings.EMBEDDING_BACKEND != "openai":
        return None
    return float(settings.EMBEDDING_QUERY_TIMEOUT) + 2.0


def _why(exc: Exception) -> str:
    """What the search page and API say about a vector leg that failed."""

    if isinstance(exc, TimeoutError):
        return gettext_noop("the embedding service did not answer in time")
    if isinstance(exc, EmbeddingError):
        return str(exc)[:300]
    if isinstance(exc, DatabaseError):
        return f"the vector index failed ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}"[:300]


def _load(order: list[Key], fused: dict[Key, float]) -> dict[Key, Hit]:
    chunk_ids = [pk for kind, pk in order if kind == "document"]
    note_ids = [pk for kind, pk in order if kind == "note"]
    chunks = DocumentChunk.objects.select_related("attachment__note__notebook").in_bulk(chunk_ids)
    notes = Note.objects.select_related("notebook").in_bulk(note_ids)
    hits: dict[Key, Hit] = {}
    for key in order:
        kind, pk = key
        if kind == "document" and pk in chunks:
            chunk = chunks[pk]
            hits[key] = Hit("document", chunk.attachment.note, chunk, fused=fused[key])
        elif kind == "note" and pk in notes:
            hits[key] = Hit("note", notes[pk], fused=fused[key])
    return hits
