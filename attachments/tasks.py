"""django-q2 entry points: thin, take ids, call one service."""

from __future__ import annotations

from attachments import services


def ingest_attachment(attachment_id: int | str) -> None:
    """Run the ingestion pipeline for one waiting attachment: this one, or another uploader's
    whose turn it is (no-op if none is waiting)."""
    services.attachment_ingest(attachment_id=int(attachment_id))


def reembed_attachment(attachment_id: int | str) -> None:
    """Embed a ready attachment's chunks again with the configured model."""
    services.attachment_reembed(attachment_id=int(attachment_id))
