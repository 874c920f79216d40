"""REST endpoints for Studio outputs; every read goes through studio.selectors with
request.user (another user's output answers 404, like a missing one)."""

from __future__ import annotations

from django.http import FileResponse, Http404
from ninja import Router, Status

from chat.selection import SourceUnavailable
from core.params import Id
from core.types import AuthenticatedHttpRequest
from studio import selectors, services
from studio.models import StudioOutput
from studio.schemas import StudioOutputDetail, StudioOutputIn, StudioOutputOut, StudioOutputPatch

router = Router(tags=["studio"])


@router.get("/notebooks/{notebook_id}/studio", response=list[StudioOutputOut])
def list_outputs(request: AuthenticatedHttpRequest, notebook_id: Id) -> list[StudioOutput]:
    """The notebook's Studio outputs, newest first (everyone's: they belong to the notebook)."""
    return list(selectors.output_list(user=request.user, notebook_id=notebook_id))


@router.post("/notebooks/{notebook_id}/studio", response={201: StudioOutputDetail})
def create_output(
    request: AuthenticatedHttpRequest, notebook_id: Id, payload: StudioOutputIn
) -> Status[StudioOutput]:
    """Make an output of `kind` in the background (poll `GET /api/studio/{id}`), from every
    ready source of the notebook or from `attachment_ids` / `note_ids`. Needs an editor's
    role; 422 when a chosen source is not the notebook's or not ready."""
    chosen = [f"attachment:{pk}" for pk in payload.attachment_ids or []]
    chosen += [f"note:{pk}" for pk in payload.note_ids or []]
    selections = [{"kind": "file", "ref": ref} for ref in chosen] or None
    try:
        output = services.output_create(
            user=request.user, notebook_id=notebook_id, kind=payload.kind, title=payload.title,
            selections=selections,
        )  # fmt: skip
    except SourceUnavailable as exc:  # like any other id naming another's object
        raise Http404(exc.messages[0]) from exc
    return Status(201, output)


@router.get("/studio/{output_id}", response=StudioOutputDetail)
def retrieve_output(request: AuthenticatedHttpRequest, output_id: Id) -> StudioOutput:
    return selectors.output_get(user=request.user, output_id=output_id)


@router.patch("/studio/{output_id}", response=StudioOutputDetail)
def rename_output(
    request: AuthenticatedHttpRequest, output_id: Id, payload: StudioOutputPatch
) -> StudioOutput:
    return services.output_rename(user=request.user, output_id=output_id, title=payload.title)


@router.post("/studio/{output_id}/regenerate", response=StudioOutputDetail)
def regenerate_output(request: AuthenticatedHttpRequest, output_id: Id) -> StudioOutput:
    """Write it again from the sources as they are now."""
    return services.output_regenerate(user=request.user, output_id=output_id)


@router.post("/studio/{output_id}/cancel", response=StudioOutputDetail)
def cancel_output(request: AuthenticatedHttpRequest, output_id: Id) -> StudioOutput:
    """Stop an output being written (a finished one stays as it is)."""
    return services.output_cancel(user=request.user, output_id=output_id)


@router.delete("/studio/{output_id}", response={204: None})
def delete_output(request: AuthenticatedHttpRequest, output_id: Id) -> Status[None]:
    services.output_delete(user=request.user, output_id=output_id)
    return Status(204, None)


@router.get("/studio/{output_id}/audio", response={200: None})
def audio_output(request: AuthenticatedHttpRequest, output_id: Id) -> FileResponse:
    """An audio overview's MP3 (404 while it has none)."""
    output = selectors.output_get(user=request.user, output_id=output_id)
    if not output.audio:
        raise Http404("This output has no audio.")
    response = FileResponse(output.audio.open("rb"), content_type="audio/mpeg")
    response["X-Content-Type-Options"] = "nosniff"
    return response
