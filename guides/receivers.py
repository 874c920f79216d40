"""What guides do when ingestion tells them about a source (attachments.signals); connected in
GuidesConfig.ready()."""

from __future__ import annotations

from typing import Any

from attachments import signals
from attachments.models import NoteAttachment
from guides.services import guides_after_delete, guides_after_ready, guides_after_reprocess


def on_ready(sender: Any, *, attachment_id: int, **kwargs: Any) -> None:
    guides_after_ready(attachment_id=attachment_id)


def on_reprocessed(sender: Any, *, attachment: NoteAttachment, **kwargs: Any) -> None:
    guides_after_reprocess(attachment=attachment)


def on_deleted(sender: Any, *, notebook_id: int, **kwargs: Any) -> None:
    guides_after_delete(notebook_id=notebook_id)


def connect() -> None:
    signals.source_ready.connect(on_ready, dispatch_uid="guides.source_ready")
    signals.source_reprocessed.connect(on_reprocessed, dispatch_uid="guides.source_reprocessed")
    signals.source_deleted.connect(on_deleted, dispatch_uid="guides.source_deleted")
