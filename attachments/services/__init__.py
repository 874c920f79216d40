"""Attachment services: `files` (upload, password, reprocess, delete) and `ingestion` (the
background pipeline), `scheduling` (which file runs next, the reaper), `reindexing` (re-chunking
stored pages). Callers import from here."""

from attachments.services.files import (
    MAX_PASSWORD_ATTEMPTS,
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
from attachments.services.scheduling import attachment_reap_stuck

__all__ = [
    "MAX_PASSWORD_ATTEMPTS",
    "DuplicateAttachment",
    "Rechunked",
    "attachment_add_as_note",
    "attachment_delete",
    "attachment_ingest",
    "attachment_reap_stuck",
    "attachment_rechunk",
    "attachment_reembed",
    "attachment_reprocess",
    "attachment_submit_password",
    "attachment_unlock_reset",
    "attachment_upload",
    "passage_windows",
    "unlocked_path",
]
