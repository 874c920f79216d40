"""REST endpoints for attachments; every handler reads through a selector with request.user."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import FileResponse
from ninja import File, Query, Router, Status
from ninja.files import UploadedFile

from attachments import selectors, services
from attachments.models import DocumentPage, NoteAttachment
from attachments.retrieval import MAX_QUERY_CHARS, Hit, Scope, search
from attachments.schemas import (
    AttachmentOut,
    PageOut,
    PasswordIn,
    SearchHitOut,
    SearchIn,
    SearchOut,
    UploadErrorOut,
    UploadOut,
)
from attachments.validation import download_name
from notebook.ratelimit import rate_limit, user_key
from notebook.types import AuthenticatedHttpRequest
from notes.selectors import note_get, notebook_get

router = Router(tags=["attachments"])


@router.post(
    "/notes/{note_id}/attachments", response={201: UploadOut, 409: UploadOut, 422: UploadOut}
)
def create_attachments(
    request: AuthenticatedHttpRequest, note_id: int, files: File[list[UploadedFile]]
) -> Status[UploadOut]:
    """Upload one or more PDFs (multipart field `files`). Each file is checked on its own:
    201 if at least one was stored, else 409 (all duplicates) or 422, with a reason per file.
    More files than the upload rate allows: 429 with Retry-After, nothing stored."""
    note = note_get(user=request.user, note_id=note_id)
    rate_limit(scope="upload", key=user_key(request.user), cost=len(files))
    created: list[NoteAttachment] = []
    errors: list[UploadErrorOut] = []
    for uploaded in files:
        try:
            created.append(
                services.attachment_upload(user=request.user, note=note, uploaded=uploaded)
            )
        except services.DuplicateAttachment as dup:
            errors.append(
                UploadErrorOut(
                    file=uploaded.name or "",
                    detail=dup.messages[0],
                    code="duplicate",
                    existing_id=dup.existing.pk,
                )
            )
        except ValidationError as exc:
            errors.append(
                UploadErrorOut(
                    file=uploaded.name or "",
                    detail=" ".join(exc.messages),
                    code=str(exc.code or "invalid"),
                )
            )
    body = UploadOut(attachments=[AttachmentOut.from_orm(a) for a in created], errors=errors)
    if created:
        return Status(201, body)
    return Status(409 if all(e.code == "duplicate" for e in errors) else 422, body)


@router.get("/notes/{note_id}/attachments", response=list[AttachmentOut])
def list_attachments(request: AuthenticatedHttpRequest, note_id: int) -> QuerySet[NoteAttachment]:
    return selectors.attachment_list(user=request.user, note_id=note_id)


@router.get("/attachments/{attachment_id}", response=AttachmentOut)
def retrieve_attachment(request: AuthenticatedHttpRequest, attachment_id: int) -> NoteAttachment:
    """Status and progress (stage, progress_current of progress_total) of one attachment."""
    return selectors.attachment_get(user=request.user, attachment_id=attachment_id)


@router.get("/attachments/{attachment_id}/file")
def download_attachment(request: AuthenticatedHttpRequest, attachment_id: int) -> FileResponse:
    """The original PDF as uploaded."""
    attachment = selectors.attachment_get(user=request.user, attachment_id=attachment_id)
    response = FileResponse(
        attachment.file.open("rb"),
        content_type="application/pdf",
        as_attachment=True,
        filename=download_name(attachment.original_name),
    )
    response["X-Content-Type-Options"] = "nosniff"
    return response


@router.get("/attachments/{attachment_id}/pages", response=list[PageOut])
def list_attachment_pages(
    request: AuthenticatedHttpRequest, attachment_id: int
) -> QuerySet[DocumentPage]:
    """The extracted text, page by page (`is_ocr` marks pages read by OCR)."""
    return selectors.attachment_pages(user=request.user, attachment_id=attachment_id)


@router.post("/attachments/{attachment_id}/password", response=AttachmentOut)
def submit_attachment_password(
    request: AuthenticatedHttpRequest, attachment_id: int, payload: PasswordIn
) -> NoteAttachment:
    """Unlock a password-protected PDF (used once, never stored). 422 on a wrong password;
    after 3 wrong ones, 409 until `reprocess` is called."""
    attachment = selectors.attachment_get(user=request.user, attachment_id=attachment_id)
    return services.attachment_submit_password(attachment=attachment, password=payload.password)


@router.post("/attachments/{attachment_id}/reprocess", response=AttachmentOut)
def reprocess_attachment(request: AuthenticatedHttpRequest, attachment_id: int) -> NoteAttachment:
    attachment = selectors.attachment_get(user=request.user, attachment_id=attachment_id)
    return services.attachment_reprocess(attachment=attachment)


@router.delete("/attachments/{attachment_id}", response={204: None})
def delete_attachment(request: AuthenticatedHttpRequest, attachment_id: int) -> Status[None]:
    attachment = selectors.attachment_get(user=request.user, attachment_id=attachment_id)
    services.attachment_delete(attachment=attachment)
    return Status(204, None)


search_router = Router(tags=["search"])


def _search(request: AuthenticatedHttpRequest, params: SearchIn) -> SearchOut:
    query = " ".join(params.q.split())
    if not query:
        raise ValidationError({"q": "Type something to search for."})
    if len(query) > MAX_QUERY_CHARS:
        raise ValidationError({"q": f"Keep the query under {MAX_QUERY_CHARS:,} characters."})
    # Filters name objects: each must be the user's own (404 otherwise), like every other route.
    if params.notebook_id is not None:
        notebook_get(user=request.user, notebook_id=params.notebook_id)
    if params.note_id is not None:
        note_get(user=request.user, note_id=params.note_id)
    for attachment_id in params.attachment_ids or []:
        selectors.attachment_get(user=request.user, attachment_id=attachment_id)
    result = search(
        user=request.user,
        query=query,
        scope=Scope(
            params.notebook_id, params.note_id, params.attachment_ids, params.include_notes
        ),
        limit=params.limit,
        mode=params.mode,
        fusion=params.fusion,
        diversity=params.diversity,
        rerank=params.rerank,
    )
    hits = [_hit_out(hit) for hit in result.hits]
    timings = {stage: round(seconds * 1000, 2) for stage, seconds in result.timings.items()}
    timings["total"] = round(result.total * 1000, 2)
    return SearchOut(query=query, mode=params.mode, hits=hits, timings_ms=timings, info=result.info)


def _hit_out(hit: Hit) -> SearchHitOut:
    note, chunk = hit.note, hit.chunk
    scores: dict[str, Any] = {
        "fused": hit.fused,
        "lexical": hit.lexical,
        "lexical_rank": hit.lexical_rank,
        "vector": hit.vector,
        "vector_rank": hit.vector_rank,
        "rerank": hit.rerank,
    }
    where: dict[str, Any] = {
        "note_id": note.pk,
        "note_title": note.title,
        "notebook_id": note.notebook_id,
    }
    if chunk is None:
        return SearchHitOut(kind="note", content=hit.text, **where, **scores)
    return SearchHitOut(
        kind="pdf",
        chunk_id=chunk.pk,
        attachment_id=chunk.attachment_id,
        file=chunk.attachment.original_name,
        page=chunk.page_number,
        heading_path=chunk.heading_path,
        start_char=chunk.start_char,
        end_char=chunk.end_char,
        content=chunk.content,
        **where,
        **scores,
    )


@search_router.get("/search", response=SearchOut)
def search_get(request: AuthenticatedHttpRequest, params: Query[SearchIn]) -> SearchOut:
    """Passages from your PDFs, best first, with every score (BM25, cosine, fused) and
    per-stage timings. Filters (`notebook_id`, `note_id`, `attachment_ids`) narrow the scope."""
    return _search(request, params)


@search_router.post("/search", response=SearchOut)
def search_post(request: AuthenticatedHttpRequest, payload: SearchIn) -> SearchOut:
    """The same as GET, with the options in a JSON body (for long queries)."""
    return _search(request, payload)
