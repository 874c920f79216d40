"""The per-user budget of model calls made on a user's behalf outside the chat agent: search's
query expansion and reranking (passages by RERANKER, whole documents by the chat model), guides
written by the chat model, source profiles (classification and extraction), memories drawn
from an answer, and the answers of Studio's FAQs and study guides. (The chat agent's own calls
are under CHAT_RATE_LIMIT instead.)

MODEL_CALL_BUDGET calls per user, counted in the window that slides over the shared
"ratelimit" cache (core.ratelimit.spend), so web processes and workers draw on one budget;
background work charges the owner of what it works on. A feature asks before it calls; when the
budget is spent it takes its offline path (the query searched as written and in fused order,
the offline guide or profile, the explicit memory statements only) and says so where it has a
page. A refused call is never sent, so it counts towards no circuit breaker: one user's spent
budget degrades that user's features, never everyone's.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, Literal

from django.conf import settings
from django.utils import timezone

from core import metrics
from core.ratelimit import spend as spend_window

logger = logging.getLogger(__name__)
Feature = Literal[
    "query expansion", "rerank", "document rerank", "guide", "profile", "memory", "studio"
]
# Why a reranker kept the fused order, as other fallbacks say it ("circuit open", "timeout").
FALLBACK = "model-call budget used up"


class BudgetSpent(Exception):
    """The user's model calls are spent: `calls` more fit again `retry_after` seconds on."""

    def __init__(self, *, user_id: int, feature: Feature, retry_after: int) -> None:
        self.feature = feature
        self.retry_after = retry_after
        self.until = timezone.now() + timedelta(seconds=retry_after)
        super().__init__(f"model-call budget of user {user_id} used up ({feature})")


def charge(*, user_id: int, feature: Feature, calls: int = 1) -> None:
    """Spend `calls` of the user's budget before making them, or raise BudgetSpent, having
    spent nothing. Charge the most calls a step may make: a step that makes fewer (a failed
    call, a tie-break not needed) is not refunded."""
    retry_after = spend_window(
        group="model", key=f"user:{user_id}", rate=settings.MODEL_CALL_BUDGET, cost=calls
    )
    if retry_after is None:
        return
    metrics.fallback("model_budget")
    logger.info(
        "model-call budget of user %s used up: %s without the model for %s s",
        user_id, feature, retry_after,
    )  # fmt: skip
    raise BudgetSpent(user_id=user_id, feature=feature, retry_after=retry_after)


def spend(*, user_id: int, feature: Feature, calls: int = 1) -> bool:
    """`charge`, as whether the calls may be made."""
    try:
        charge(user_id=user_id, feature=feature, calls=calls)
    except BudgetSpent:
        return False
    return True


def record(info: dict[str, Any], refusal: BudgetSpent) -> None:
    """Say in a search result's `info` that the budget kept the model out, and until when (the
    latest of its refusals)."""
    held = info.get("model_budget")
    if held and held["retry_after"] >= refusal.retry_after:
        return
    info["model_budget"] = {
        "used_up": True,
        "retry_after": refusal.retry_after,
        "until": refusal.until.isoformat(),
    }
