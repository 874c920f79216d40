"""Document-level search ("documents" mode): one result per source, from the source's profile
vector (intelligence.models.SourceProfile.embedding: its better name, type and extracted data) fused
with the best passage score per source, then reranked per candidate by the chat model
(search.doc_rerank). Every leg is scoped in SQL through the notes selectors (search.retrieval's
scoped_attachments), never post-filtered. See docs/retrieval.md, "Search in any language".
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection, transaction

from attachments.models import NoteAttachment
from attachments.naming import display_name, suggested_name
from core import metrics, model_budget
from intelligence.models import SourceProfile, recognised_q
from search.doc_rerank import (
    CANDIDATE_CHARS,
    Candidate,
    DocRerankOutcome,
    most_calls,
    rerank_documents,
)
from search.fusion import rrf
from search.retrieval import (
    EF_SEARCH,
    Hit,
    Scope,
    SearchResult,
    _clean,
    _embed_query,
    _why,
    scoped_attachments,
    search,
    vector_weight,
)

if TYPE_CHECKING:
    from core.types import User

logger = logging.getLogger(__name__)
CANDIDATES = 50  # documents fused and reranked
PASSAGE_POOL = 200  # passages searched to find each document's best one


@dataclass
class DocumentHit:
    attachment: NoteAttachment
    fused: float
    similarity: float | None = None  # cosine of the query and the document vector (best query)
    passage: Hit | None = None  # the document's best passage
    passage_rank: int | None = None  # its document's rank among the passages' documents
    rerank: float | None = None

    @property
    def profile(self) -> SourceProfile | None:
        try:
            return self.attachment.profile
        except SourceProfile.DoesNotExist:
            return None

    @property
    def recognised(self) -> SourceProfile | None:
        """The profile when its type was recognised (SourceProfile.recognised), else None:
        nothing of an unrecognised profile is shown."""
        profile = self.profile
        return profile if profile and profile.recognised else None

    @property
    def doc_type(self) -> str:
        profile = self.profile
        if profile is None:
            return ""
        return profile.doc_type if profile.recognised else SourceProfile.DocType.OTHER

    @property
    def doc_type_label(self) -> str:
        profile = self.recognised
        if profile is None or profile.doc_type == SourceProfile.DocType.OTHER:
            return ""
        return str(profile.get_doc_type_display())

    @property
    def display_name(self) -> str:
        return display_name(self.attachment)

    @property
    def suggested_name(self) -> str:
        return suggested_name(self.attachment)


def profile_vector(
    *, user: User, embedding: list[float], scope: Scope, limit: int
) -> list[tuple[int, float]]:
    """(attachment id, cosine similarity of its document vector), best first, among the
    documents in scope: the scope is SQL from the selectors, joined before the index scan."""
    literal = "[" + ",".join(f"{v:.7g}" for v in embedding) + "]"
    scope_sql, scope_params = scoped_attachments(user=user, scope=scope)
    table = SourceProfile._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL hnsw.ef_search = {EF_SEARCH}")
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute(
            f"WITH scope AS MATERIALIZED ({scope_sql}) "  # noqa: S608 - built by the ORM
            f"SELECT p.attachment_id, 1 - (p.embedding <=> %s::vector) FROM {table} p "
            "WHERE p.attachment_id IN (SELECT id FROM scope) AND p.embedding IS NOT NULL "
            "ORDER BY p.embedding <=> %s::vector LIMIT %s",
            [*scope_params, literal, literal, limit],
        )
        return [(int(pk), float(sim)) for pk, sim in cursor.fetchall()]


def candidate_text(hit: DocumentHit, passages: list[Hit]) -> str:
    """What the reranker judges: type, better name and extracted data; passages without any."""
    profile = hit.profile
    head = f"Original file name: {hit.attachment.original_name}"
    if profile and profile.extracted:
        data = json.dumps(profile.extracted, ensure_ascii=False, default=str)
        text = (
            f"Type: {profile.doc_type}\nName: {profile.better_name}\n{head}\nExtracted data: {data}"
        )
    else:
        quoted = "\n".join(" ".join(p.text.split()) for p in passages[:3])
        text = f"{head}\nPassages:\n{quoted}"
    return text[:CANDIDATE_CHARS]


def search_documents(
    *,
    user: User,
    query: str,
    scope: Scope | None = None,
    limit: int = 10,
    candidates: int = CANDIDATES,
    extra_queries: list[str] | None = None,
    doc_type_hint: str | None = None,
    rerank: bool | None = None,
) -> SearchResult:
    """One hit per document (SearchResult.documents), best first: the document vector leg (per
    query: the original and its English forms) fused by RRF with the documents' best passages,
    plus a small lift for documents of `doc_type_hint` (the type the chat model inferred; a
    user-chosen type is `scope.doc_type`, a hard filter). The top `candidates` are reranked by
    the chat model when `rerank` (default: when CHAT_MODEL is set) and the user's model-call
    budget has room for every call that may take (else the fused order stays)."""

    scope = replace(scope or Scope(), include_notes=False)
    started = time.perf_counter()
    timings: dict[str, float] = {}
    info: dict[str, Any] = {"mode": "documents", "candidates": candidates}
    passages = search(
        user=user,
        query=query,
        scope=scope,
        limit=PASSAGE_POOL,
        mode="hybrid",
        candidates=PASSAGE_POOL,
        rerank=False,
        extra_queries=extra_queries,
        two_level=False,  # every document's best passage: the documents are ranked here
    )
    info.update({k: v for k, v in passages.info.items() if k in ("query_language", "degraded")})
    if passages.info.get("warming_up"):
        info["warming_up"] = True
    by_document: dict[int, list[Hit]] = {}
    for hit in passages.hits:
        if hit.chunk is not None:
            by_document.setdefault(hit.chunk.attachment_id, []).append(hit)
    legs: dict[str, list[tuple[int, float]]] = {
        "passages": [(pk, hits[0].fused) for pk, hits in by_document.items()]
    }
    weights: dict[str, float] = {"passages": 1.0}
    if not info.get("warming_up") and "degraded" not in info:
        for n, text in enumerate([_clean(query), *(extra_queries or [])]):
            name = "document" if n == 0 else f"document:{n}"
            try:
                embedding, _ = _embed_query(text)
                legs[name] = profile_vector(
                    user=user, embedding=embedding, scope=scope, limit=candidates
                )
            except Exception as exc:  # a failing embedder costs this leg, never the search
                logger.warning("document search without its vector leg: %s", _why(exc))
                break
            # The original query in a language the model does not cover does not vote.
            weights[name] = vector_weight(text)[0] if n == 0 else settings.SEARCH_VECTOR_WEIGHT
    fused = rrf(legs, weights)
    if doc_type_hint and not scope.doc_type and fused:
        matching = SourceProfile.objects.filter(
            recognised_q(), attachment_id__in=list(fused), doc_type=doc_type_hint
        ).values_list("attachment_id", flat=True)
        hinted = sorted(matching, key=lambda pk: -fused[pk])
        fused = rrf({**legs, "doc_type": [(pk, 1.0) for pk in hinted]}, weights)
        info["doc_type_hint"] = doc_type_hint
    order = sorted(fused, key=lambda pk: (-fused[pk], pk))[:candidates]
    attachments = NoteAttachment.objects.select_related("note__notebook", "profile").in_bulk(order)
    similarity: dict[int, float] = {}
    for name, leg in legs.items():
        if name.startswith("document"):
            for pk, sim in leg:
                similarity[pk] = max(sim, similarity.get(pk, -1.0))
    passage_rank = {pk: rank for rank, (pk, _) in enumerate(legs["passages"], start=1)}
    documents = [
        DocumentHit(
            attachment=attachments[pk],
            fused=fused[pk],
            similarity=similarity.get(pk),
            passage=next(iter(by_document.get(pk, [])), None),
            passage_rank=passage_rank.get(pk),
        )
        for pk in order
        if pk in attachments
    ]
    info["weights"] = weights
    timings["search"] = time.perf_counter() - started

    if rerank is None:
        rerank = bool(settings.CHAT_MODEL)
    if rerank and documents:
        pool = [
            Candidate(str(d.attachment.pk), candidate_text(d, by_document.get(d.attachment.pk, [])))
            for d in documents
        ]
        try:
            if settings.CHAT_MODEL:  # the most calls it may make, charged before any is made
                model_budget.charge(
                    user_id=user.pk, feature="document rerank", calls=most_calls(len(pool))
                )
            outcome = rerank_documents(_clean(query), pool)
        except model_budget.BudgetSpent as refused:
            model_budget.record(info, refused)
            outcome = DocRerankOutcome(backend="llm", fallback=model_budget.FALLBACK)
        timings["rerank"] = outcome.seconds
        info["rerank"] = {
            "backend": outcome.backend,
            "kind": "per-candidate",
            "fallback": outcome.fallback,
            "calls": outcome.calls,
            "max_in_flight": outcome.max_in_flight,
            "concurrency": int(settings.RERANK_CONCURRENCY),
            "tie_break": outcome.tie_break,
        }
        for document in documents:
            score = (outcome.scores or {}).get(str(document.attachment.pk))
            document.rerank = score
        if outcome.order is not None:
            position = {doc: n for n, doc in enumerate(outcome.order)}
            documents.sort(key=lambda d: position.get(str(d.attachment.pk), len(position)))
    total = time.perf_counter() - started
    metrics.observe_search(timings, total, info, mode="documents")
    result = SearchResult([], timings, info, total, passages.degraded_reason)
    result.documents = documents[:limit]
    return result
