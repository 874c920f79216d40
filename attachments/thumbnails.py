"""Thumbnails of sources: a small WebP per attachment (an image scaled down; a PDF's first page
rendered by PDFium), made in a child process under the extraction memory cap right after
ingestion, or on first request for files ingested before thumbnails existed. Stored under
MEDIA_ROOT/thumbnails/<note id>/<uuid>.webp and deleted with the attachment.

A thumbnail that cannot be made (a damaged or password-protected file) leaves an empty file
behind, so it is not tried again on every page view; Reprocess tries again."""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings

from attachments.models import NoteAttachment
from attachments.pdf.extract import PdfError, render_thumbnail

logger = logging.getLogger(__name__)


def thumbnail_path(attachment: NoteAttachment) -> Path:
    return (
        Path(settings.MEDIA_ROOT)
        / "thumbnails"
        / str(attachment.note_id)
        / f"{attachment.uuid}.webp"
    )


def thumbnail_make(*, attachment: NoteAttachment, source: Path | None = None) -> Path | None:
    """Write the attachment's thumbnail from `source` (default: its stored file); the path,
    or None when it could not be made (an empty marker file is left instead)."""
    out = thumbnail_path(attachment)
    if attachment.format:  # a non-PDF source has no page to draw: never fed to the renderer
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        render_thumbnail(source or Path(attachment.file.path), out, kind=attachment.kind)
    except (PdfError, OSError) as exc:
        logger.info("no thumbnail for attachment %s: %s", attachment.pk, exc)
        out.write_bytes(b"")
        return None
    return out if out.exists() and out.stat().st_size else None


def thumbnail_for(attachment: NoteAttachment) -> Path | None:
    """The thumbnail to serve, made now if a ready attachment has none yet; None when there
    is none (not ready yet, or it could not be made)."""
    out = thumbnail_path(attachment)
    if not out.exists():
        if attachment.status != NoteAttachment.Status.READY:
            return None
        return thumbnail_make(attachment=attachment)
    return out if out.stat().st_size else None
