"""REST endpoints for guides; every handler reads through a selector with request.user."""

from __future__ import annotations

from typing import Any

from ninja import Router

from core.params import Id
from core.types import AuthenticatedHttpRequest
from guides import services
from guides.models import Guide
from guides.schemas import GuideOut

router = Router(tags=["guides"])


def _out(guide: Guide | None, kind: str) -> dict[str, Any]:
    if guide is None:  # not asked for yet: an empty guide of that kind
        return {**_out(Guide(kind=kind), kind), "status": "none", "generator": ""}
    return {
        "kind": guide.kind,
        "status": guide.status,
        "generator": guide.generator,
        "model": guide.model,
        "stale": guide.is_active and guide.has_content,
        "error": guide.error,
        **guide.content(),
        "ready_at": guide.ready_at,
    }


@router.get("/attachments/{attachment_id}/guide", response=GuideOut)
def retrieve_source_guide(request: AuthenticatedHttpRequest, attachment_id: Id) -> dict[str, Any]:
    """The PDF's guide: summary (with cited quotes), key topics, heading outline and
    suggested questions. `status` is `none` until the PDF is ready; poll while `pending` or
    `processing`."""
    found = services.source_guide_ensure(user=request.user, attachment_id=attachment_id)
    return _out(found.guide, Guide.Kind.SOURCE)


@router.get("/notebooks/{notebook_id}/guide", response=GuideOut)
def retrieve_notebook_guide(request: AuthenticatedHttpRequest, notebook_id: Id) -> dict[str, Any]:
    """The guide over all ready PDFs of the notebook, refreshed shortly after they change."""
    found = services.notebook_guide_ensure(user=request.user, notebook_id=notebook_id)
    return _out(found.guide, Guide.Kind.NOTEBOOK)
