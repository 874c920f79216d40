from __future__ import annotations

from datetime import datetime

from ninja import Field, Schema


class AttachmentOut(Schema):
    id: int
    note_id: int
    original_name: str
    kind: str  # "pdf" | "image" | "document" | "web" | "transcript" | "audio"
    format: str  # within the kind: "docx", "html", "vtt", "youtube", … ("" for PDFs, images)
    source_url: str  # a link's address ("" for an uploaded file)
    size: int
    sha256: str
    page_count: int | None
    status: str
    # The status badge's words ("Searchable by keywords" while a processing file's words are
    # indexed already), in the request's language.
    status_label: str
    keyword_searchable: bool
    stage: str
    progress_current: int
    progress_total: int
    progress_percent: int
    error: str
    ocr_pages: int
    password_attempts: int
    language: str
    embedding_model: str
    created_at: datetime
    ready_at: datetime | None
    searchable_at: datetime | None


class UploadErrorOut(Schema):
    file: str
    detail: str
    code: str
    existing_id: int | None = None  # the attachment already holding this PDF
    existing_note_id: int | None = None  # the note already holding this text


class TextSourceOut(Schema):
    """A Markdown or text file that became a note."""

    file: str
    note_id: int
    title: str


class UploadOut(Schema):
    attachments: list[AttachmentOut]
    notes: list[TextSourceOut] = []
    errors: list[UploadErrorOut]


class PageOut(Schema):
    number: int
    text: str
    is_ocr: bool


class PasswordIn(Schema):
    password: str


class LinkIn(Schema):
    url: str = Field(max_length=4000, description="A web page, or a YouTube video's address.")
