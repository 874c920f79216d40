"""REST endpoints for exports; every read goes through exports.bundles with request.user."""

from __future__ import annotations

from typing import Literal

from django.http import HttpResponse, StreamingHttpResponse
from django.utils.translation import gettext
from ninja import Router

from core.params import Id
from core.types import AuthenticatedHttpRequest
from exports import bundles
from exports.responses import markdown_response, pdf_response, zip_response

router = Router(tags=["exports"])


@router.get("/notebooks/{notebook_id}/export")
def export_notebook(
    request: AuthenticatedHttpRequest, notebook_id: Id, originals: bool = False
) -> StreamingHttpResponse:
    """The notebook as a ZIP (application/zip), streamed: notes/ and trash/ (Markdown with
    front matter), conversations/ (yours only), guides/, with `originals=true` sources/ (the
    original files), and README.md listing what is inside."""
    bundle = bundles.notebook_bundle(
        user=request.user, notebook_id=notebook_id, originals=originals
    )
    return zip_response(request, bundle)


@router.get("/conversations/{conversation_id}/export")
def export_conversation(request: AuthenticatedHttpRequest, conversation_id: Id) -> HttpResponse:
    """One of your conversations as Markdown (text/markdown): each question and answer, the
    answers' verified citations as footnotes naming file, page and quote."""
    filename, text = bundles.conversation_export(user=request.user, conversation_id=conversation_id)
    return markdown_response(filename, text)


@router.get("/me/export")
def export_me(request: AuthenticatedHttpRequest, originals: bool = True) -> StreamingHttpResponse:
    """Everything you own and wrote as one streamed ZIP: account.json (no password or token
    hashes), notebooks/ (each you own, with your memories) and shared/ (your conversations,
    memories and notes in notebooks shared with you)."""
    return zip_response(request, bundles.user_bundle(user=request.user, originals=originals))


@router.get("/studio/{output_id}/export")
def export_studio_output(
    request: AuthenticatedHttpRequest, output_id: Id, format: Literal["md", "pdf"] = "md"
) -> HttpResponse:
    """A ready Studio output as Markdown (text/markdown), citations as footnotes naming file,
    page and quote, or with `format=pdf` as PDF; 409 while it is not ready."""
    if format == "pdf":
        as_pdf = bundles.studio_pdf_export(user=request.user, output_id=output_id)
        return pdf_response(*as_pdf) if as_pdf else _not_ready()
    found = bundles.studio_export(user=request.user, output_id=output_id)
    return markdown_response(*found) if found else _not_ready()


def _not_ready() -> HttpResponse:
    return HttpResponse(
        gettext("This output is not ready yet."),
        status=409,
        content_type="text/plain; charset=utf-8",
    )
