"""REST endpoints for source profiles; every handler reads through a selector with request.user."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from ninja import Router

from attachments.models import NoteAttachment
from attachments.naming import display_name, suggested_name
from core.params import Id
from core.types import AuthenticatedHttpRequest
from intelligence import selectors, services
from intelligence.schemas import ProfileIn, ProfileOut
from notes.models import Role

router = Router(tags=["intelligence"])


def _out(attachment: NoteAttachment) -> dict[str, Any]:
    profile = selectors.profile_of(attachment)
    base = {
        "attachment_id": attachment.pk,
        "original_name": attachment.original_name,
        "display_name": display_name(attachment),
        "suggested_name": suggested_name(attachment),
    }
    if profile is None:
        return {
            **base,
            "status": "none",
            "recognised": False,
            "name_accepted": False,
            "doc_type": "other",
            "confidence": 0.0,
            "better_name": "",
            "doc_date": None,
            "extracted": {},
            "edited": False,
            "method": "",
            "timings": {},
            "error": "",
            "updated_at": None,
        }
    return {
        **base,
        "status": profile.status,
        "recognised": profile.recognised,
        "name_accepted": profile.name_accepted,
        "doc_type": profile.doc_type,
        "confidence": profile.confidence,
        "better_name": profile.better_name,
        "doc_date": profile.doc_date,
        "extracted": profile.extracted,
        "edited": profile.edited,
        "method": profile.method,
        "timings": profile.timings,
        "error": profile.error,
        "updated_at": profile.updated_at,
    }


@router.get("/attachments/{attachment_id}/profile", response=ProfileOut)
def retrieve_profile(request: AuthenticatedHttpRequest, attachment_id: Id) -> dict[str, Any]:
    """The source's document type, confidence, better name, display name and extracted data
    (`status` is `none` until it has been analysed; poll while `pending` or `processing`)."""
    attachment = selectors.source_get(user=request.user, attachment_id=attachment_id)
    return _out(attachment)


@router.patch("/attachments/{attachment_id}/profile", response=ProfileOut)
def update_profile(
    request: AuthenticatedHttpRequest, attachment_id: Id, payload: ProfileIn
) -> dict[str, Any]:
    """Correct the type, name or data (validated; marks the profile edited so a regeneration
    keeps them), and/or accept the suggested file name for downloads (`name_accepted`; false
    goes back to the uploaded name). 404 for anyone else's source or a source not analysed
    yet."""
    attachment = selectors.source_get(
        user=request.user, attachment_id=attachment_id, role=Role.EDITOR
    )
    profile = selectors.profile_of(attachment)
    if profile is None:
        raise Http404
    corrections = (payload.doc_type, payload.better_name, payload.extracted)
    if any(value is not None for value in corrections):
        profile = services.profile_edit(
            profile=profile,
            doc_type=payload.doc_type,
            better_name=payload.better_name,
            extracted=payload.extracted,
        )
    if payload.name_accepted is not None:
        services.profile_name_accept(profile=profile, accepted=payload.name_accepted)
    attachment.refresh_from_db()
    return _out(selectors.source_get(user=request.user, attachment_id=attachment_id))
