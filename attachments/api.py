"""REST endpoints for attachments; every handler reads through a selector with request.user."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import FileResponse
from ninja import File, Router, Status
from ninja.files import UploadedFile

from attachments import selectors, services
from attachments.models import DocumentPage, NoteAttachment
from attachments.naming import display_name
from attachments.schemas import (
    AttachmentOut,
    LinkIn,
    PageOut,
    PasswordIn,
    TextSourceOut,
    UploadErrorOut,
    UploadOut,
)
from attachments.validation import download_name, upload_batch_limit_error
from core.params import Id
from core.ratelimit import rate_limit, user_key
from core.types import AuthenticatedHttpRequest
from notes.models import Role
from notes.selectors import note_get, notebook_get

router = Router(tags=["attachments"])


@router.post(
    "/notes/{note_id}/attachments", response={201: UploadOut, 409: UploadOut, 422: UploadOut}
)
def create_attachments(
    request: AuthenticatedHttpRequest, note_id: Id, files: File[list[UploadedFile]]
) -> Status[UploadOut]:
    """Upload one or more files (multipart field `files`): PDFs are attached to the note; a
    Markdown (.md) or text (.txt) file becomes a new note of the same notebook (`notes`); an
    image (.jpg, .jpeg, .png, .gif, .webp, checked by content) is attached and OCR'd like a
    one-page PDF. Any other extension is refused (`file_type`) before anything is stored, and
    so is a request with more than MAX_UPLOAD_FILES files (`too_many_files`, 422). Each file
    is checked on its own: 201 if at least one was stored, else 409 (all duplicates) or 422,
    with a reason per file. More files than the upload rate allows: 429 with Retry-After,
    nothing stored."""
    note = note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
    if (too_many := upload_batch_limit_error(len(files))) is not None:
        error = UploadErrorOut(file="", detail=" ".join(too_many.messages), code="too_many_files")
        return Status(422, UploadOut(attachments=[], notes=[], errors=[error]))
    rate_limit(scope="upload", key=user_key(request.user), cost=len(files))
    created: list[NoteAttachment] = []
    notes: list[TextSourceOut] = []
    errors: list[UploadErrorOut] = []
    for uploaded in files:
        try:
            added = services.source_add(
                user=request.user, notebook=note.notebook, note=note, uploaded=uploaded
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
            continue
        except services.DuplicateText as dup:
            errors.append(
                UploadErrorOut(
                    file=uploaded.name or "",
                    detail=dup.messages[0],
                    code="duplicate",
                    existing_note_id=dup.existing_note.pk,
                )
            )
            continue
        except ValidationError as exc:
            errors.append(
                UploadErrorOut(
                    file=uploaded.name or "",
                    detail=" ".join(exc.messages),
                    code=str(exc.code or "invalid"),
                )
            )
            continue
        if added.attachment is not None:
            created.append(added.attachment)
        elif added.note is not None:
            notes.append(
                TextSourceOut(file=added.name, note_id=added.note.pk, title=added.note.title)
            )
    body = UploadOut(
        attachments=[AttachmentOut.from_orm(a) for a in created], notes=notes, errors=errors
    )
    if created or notes:
        return Status(201, body)
    return Status(409 if all(e.code == "duplicate" for e in errors) else 422, body)


@router.get("/notes/{note_id}/attachments", response=list[AttachmentOut])
def list_attachments(request: AuthenticatedHttpRequest, note_id: Id) -> QuerySet[NoteAttachment]:
    return selectors.attachment_list(user=request.user, note_id=note_id)


@router.get("/attachments/{attachment_id}", response=AttachmentOut)
def retrieve_attachment(request: AuthenticatedHttpRequest, attachment_id: Id) -> NoteAttachment:
    """Status and progress (stage, progress_current of progress_total) of one attachment."""
    return selectors.attachment_get(user=request.user, attachment_id=attachment_id)


@router.get("/attachments/{attachment_id}/file")
def download_attachment(request: AuthenticatedHttpRequest, attachment_id: Id) -> FileResponse:
    """The original file as uploaded, under the user's file name (or the suggested one, when
    they accepted it)."""
    attachment = selectors.attachment_get(user=request.user, attachment_id=attachment_id)
    response = FileResponse(
        attachment.file.open("rb"),
        content_type=attachment.media_type,
        as_attachment=True,
        filename=download_name(display_name(attachment), attachment.extension),
    )
    response["X-Content-Type-Options"] = "nosniff"
    return response


@router.get("/attachments/{attachment_id}/pages", response=list[PageOut])
def list_attachment_pages(
    request: AuthenticatedHttpRequest, attachment_id: Id
) -> QuerySet[DocumentPage]:
    """The extracted text, page by page (`is_ocr` marks pages read by OCR)."""
    return selectors.attachment_pages(user=request.user, attachment_id=attachment_id)


@router.post("/notebooks/{notebook_id}/links", response={201: AttachmentOut})
def create_link(
    request: AuthenticatedHttpRequest, notebook_id: Id, payload: LinkIn
) -> Status[NoteAttachment]:
    """Add a web page (or a YouTube video's transcript) by its address, on a new note titled
    after it; the worker fetches it (public addresses only; size and time capped) and reads it
    like a file: poll the attachment for its status. 422 for an address that is not http(s),
    409 when the notebook has it already."""
    notebook = notebook_get(user=request.user, notebook_id=notebook_id, role=Role.EDITOR)
    rate_limit(scope="upload", key=user_key(request.user))  # 429 beyond it (notebook.api)
    attachment = services.source_add_link(user=request.user, notebook=notebook, url=payload.url)
    return Status(201, attachment)


@router.post("/attachments/{attachment_id}/password", response=AttachmentOut)
def submit_attachment_password(
    request: AuthenticatedHttpRequest, attachment_id: Id, payload: PasswordIn
) -> NoteAttachment:
    """Unlock a password-protected PDF (used once, never stored). 422 on a wrong password;
    after 3 wrong ones, 409 until `reprocess` is called."""
    attachment = selectors.attachment_get(
        user=request.user, attachment_id=attachment_id, role=Role.EDITOR
    )
    return services.attachment_submit_password(attachment=attachment, password=payload.password)


@router.post("/attachments/{attachment_id}/reprocess", response=AttachmentOut)
def reprocess_attachment(request: AuthenticatedHttpRequest, attachment_id: Id) -> NoteAttachment:
    attachment = selectors.attachment_get(
        user=request.user, attachment_id=attachment_id, role=Role.EDITOR
    )
    rate_limit(scope="reprocess", key=user_key(request.user))  # 429 beyond it (notebook.api)
    return services.attachment_reprocess(attachment=attachment)


@router.delete("/attachments/{attachment_id}", response={204: None})
def delete_attachment(request: AuthenticatedHttpRequest, attachment_id: Id) -> Status[None]:
    attachment = selectors.attachment_get(
        user=request.user, attachment_id=attachment_id, role=Role.EDITOR
    )
    services.attachment_delete(attachment=attachment)
    return Status(204, None)
