"""Fusing ranked legs into one score per passage, and source anchoring of a follow-up's
search (search.retrieval runs the legs and uses these)."""

from __future__ import annotations

from typing import TypeVar

from attachments.models import DocumentChunk

RRF_K = 60
T = TypeVar("T")
K = TypeVar("K", bound=tuple[str, int])  # ("document", chunk id) or ("note", note id)


def rrf(
    legs: dict[str, list[tuple[T, float]]], weights: dict[str, float] | None = None
) -> dict[T, float]:
    """Reciprocal rank fusion: each leg adds weight / (RRF_K + rank)."""
    fused: dict[T, float] = {}
    for name, ranked in legs.items():
        weight = (weights or {}).get(name, 1.0)
        for rank, (key, _) in enumerate(ranked, start=1):
            fused[key] = fused.get(key, 0.0) + weight / (RRF_K + rank)
    return fused


def minmax(
    legs: dict[str, list[tuple[T, float]]], weights: dict[str, float] | None = None
) -> dict[T, float]:
    """Weighted sum of scores min-max normalised per leg (a passage missing from a leg gets 0
    from it). Unlike RRF it keeps how far ahead the best candidates are."""
    fused: dict[T, float] = {}
    for name, ranked in legs.items():
        weight = (weights or {}).get(name, 1.0)
        if not ranked or not weight:
            continue
        top, bottom = ranked[0][1], ranked[-1][1]
        spread = (top - bottom) or 1.0
        for key, score in ranked:
            fused[key] = fused.get(key, 0.0) + weight * (score - bottom) / spread
    return fused


def anchor(
    fused: dict[K, float],
    attachment_ids: set[int],
    boost: float,
    pages: set[tuple[int, int]] | None = None,
    page_boost: float = 0.0,
    window: int = 0,
) -> dict[K, float]:
    """Source anchoring: fused scores min-max normalised to 0..1 over the candidates, plus
    `boost` for the chunks of the anchored documents (and `page_boost` more on the anchored
    pages and up to `window` pages either side of them). Under RRF the normalised score is the
    rank equivalent: 1 for the best candidate, 0 for the last."""
    if not fused or boost <= 0:
        return fused
    rows = DocumentChunk.objects.filter(
        pk__in=[pk for kind, pk in fused if kind == "document"],
        attachment_id__in=attachment_ids,
    ).values_list("pk", "attachment_id", "page_number")
    near = {(a, page + d) for a, page in pages or set() for d in range(-window, window + 1)}
    lift = {pk: boost + (page_boost if (a, page) in near else 0.0) for pk, a, page in rows}
    low, high = min(fused.values()), max(fused.values())
    spread = (high - low) or 1.0
    return {
        key: (score - low) / spread + (lift.get(key[1], 0.0) if key[0] == "document" else 0.0)
        for key, score in fused.items()
    }
