"""Attachment services: `files` (upload, password, reprocess, delete), `sources` (any uploaded
file, by kind: PDFs are stored, text files become notes), `ingestion` (the background
pipeline), `reuse` (a PDF its owner already has ingested is copied, not ingested again),
`scheduling` (which file runs next, the reaper), `reindexing` (re-chunking stored pages).
Callers import from here."""

from attachments.models import MAX_PASSWORD_ATTEMPTS
from attachments.services.files import (
    DuplicateAttachment,
    attachment_add_as_note,
    attachment_delete,
    attachment_reprocess,
    attachment_submit_password,
    attachment_unlock_reset,
    attachment_upload,
    unlocked_path,
)
from attachments.services.ingestion import attachment_ingest, attachment_reembed, passage_windows
from attachments.services.reindexing import Rechunked, attachment_rechunk
from attachments.services.scheduling import INGESTION
from attachments.services.sources import (
    AddedSource,
    DuplicateText,
    note_holding_text,
    source_add,
    source_add_link,
    text_source_add,
)

__all__ = [
    "INGESTION",
    "MAX_PASSWORD_ATTEMPTS",
    "AddedSource",
    "DuplicateAttachment",
    "DuplicateText",
    "Rechunked",
    "attachment_add_as_note",
    "attachment_delete",
    "attachment_ingest",
    "attachment_rechunk",
    "attachment_reembed",
    "attachment_reprocess",
    "attachment_submit_password",
    "attachment_unlock_reset",
    "attachment_upload",
    "note_holding_text",
    "passage_windows",
    "source_add",
    "source_add_link",
    "text_source_add",
    "unlocked_path",
]
