"""Search in any language: the one entry point of the search page and /api/search.

1. Expansion (search.expansion): with a chat model, the query's language, English translation,
   expanded English query and inferred document type, in one JSON call; offline, the query as
   written (and the page says translation needs a chat model).
2. Search: the query as written AND its English forms, fused (passages: search.retrieval;
   whole documents: search.documents). A document type the user chose filters in SQL and wins
   over the inferred one, which only lifts matching documents.
3. Rerank: passages by RERANKER (core.rerank); documents per candidate by the chat model
   (search.doc_rerank).

Every model call of a search draws on the user's model-call budget (core.model_budget);
when it is spent, the stage takes its offline path and `info["model_budget"]` says until when.

The stages' wall times are `info["stages"]` (seconds) beside the finer `timings`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django.conf import settings

from core import model_budget
from core.model_budget import BudgetSpent
from search.documents import search_documents
from search.expansion import BUDGET_SPENT, Expansion, expand
from search.retrieval import Scope, SearchResult, search

if TYPE_CHECKING:
    from core.types import User


def search_any_language(
    *,
    user: User,
    query: str,
    scope: Scope | None = None,
    mode: str = "hybrid",
    limit: int = 10,
    expand_query: bool = True,
    rerank: bool | None = None,
    **options: Any,
) -> SearchResult:
    """Ranked passages (or, in "documents" mode, documents) for `query` in any language."""
    scope = scope or Scope()
    started = time.perf_counter()
    refused: BudgetSpent | None = None
    expansion = Expansion(query=query)
    if expand_query:
        try:
            if settings.CHAT_MODEL:
                model_budget.charge(user_id=user.pk, feature="query expansion")
            expansion = expand(query)
        except BudgetSpent as exc:
            refused = exc
            expansion = Expansion(query=query, fallback=BUDGET_SPENT)
    chosen = scope.doc_type
    doc_type = chosen or expansion.doc_type
    if mode == "documents":
        result = search_documents(
            user=user,
            query=query,
            scope=scope,
            limit=limit,
            extra_queries=expansion.queries,
            doc_type_hint=None if chosen else expansion.doc_type,
            rerank=rerank,
        )
    else:
        result = search(
            user=user,
            query=query,
            scope=replace(scope),
            limit=limit,
            mode=mode,  # type: ignore[arg-type]
            rerank=rerank,
            extra_queries=expansion.queries,
            budgeted=True,
            **options,
        )
    stage_search = result.total - result.timings.get("rerank", 0.0)
    result.timings = {"expansion": expansion.seconds, **result.timings}
    result.info["expansion"] = expansion.as_info()
    result.info["expansion_fallback"] = expansion.fallback  # the English message, for gettext
    if refused is not None:
        model_budget.record(result.info, refused)
    result.info["doc_type"] = {
        "value": doc_type,
        "source": "user" if chosen else ("inferred" if doc_type else None),
    }
    result.info["stages"] = {
        "expansion": expansion.seconds,
        "search": stage_search,
        "rerank": result.timings.get("rerank", 0.0),
    }
    result.total = time.perf_counter() - started
    return result
