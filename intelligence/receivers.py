"""What intelligence does when ingestion tells it about a source (attachments.signals);
connected in IntelligenceConfig.ready()."""

from __future__ import annotations

from typing import Any

from attachments import signals
from attachments.models import NoteAttachment
from intelligence.services import profile_after_ready, profile_after_reprocess


def on_ready(sender: Any, *, attachment_id: int, **kwargs: Any) -> None:
    profile_after_ready(attachment_id=attachment_id)


def on_reprocessed(sender: Any, *, attachment: NoteAttachment, **kwargs: Any) -> None:
    profile_after_reprocess(attachment=attachment)


def connect() -> None:
    signals.source_ready.connect(on_ready, dispatch_uid="intelligence.source_ready")
    signals.source_reprocessed.connect(
        on_reprocessed, dispatch_uid="intelligence.source_reprocessed"
    )
