"""django-q2 entry points: thin, take ids, call one service."""

from __future__ import annotations

from attachments import services
from attachments.services import vectors_next


def ingest_attachment(attachment_id: int | str) -> None:
    """Run the ingestion pipeline for one waiting attachment: this one, or another uploader's
    whose turn it is (no-op if none is waiting)."""
    services.attachment_ingest(attachment_id=int(attachment_id))


def reembed_attachment(attachment_id: int | str) -> None:
    """Embed a ready attachment's chunks again with the configured model."""
    services.attachment_reembed(attachment_id=int(attachment_id))


def vectors_next_source(build_id: int | str, attachment_id: int | str) -> None:
    """A background re-embedding: one source's vectors of the new model, then what is next."""
    vectors_next.build_source(build_id=int(build_id), attachment_id=int(attachment_id))
    vectors_next.advance(build_id=int(build_id))


def vectors_next_notes(build_id: int | str) -> None:
    """A background re-embedding: the notes' vectors of the new model, then what is next."""
    vectors_next.build_notes(build_id=int(build_id))
    vectors_next.advance(build_id=int(build_id))
