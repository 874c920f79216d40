"""What intelligence does when ingestion tells it about a source, or `manage.py reembed` about
a new embedding model (attachments.signals); connected in IntelligenceConfig.ready()."""

from __future__ import annotations

from typing import Any

from attachments import signals
from attachments.models import NoteAttachment
from intelligence.services import profile_after_ready, profile_after_reprocess
from intelligence.vectors import profile_vectors_resize, profiles_reembed


def on_ready(sender: Any, *, attachment_id: int, **kwargs: Any) -> None:
    profile_after_ready(attachment_id=attachment_id)


def on_reprocessed(sender: Any, *, attachment: NoteAttachment, **kwargs: Any) -> None:
    profile_after_reprocess(attachment=attachment)


def on_vectors_resized(sender: Any, *, cursor: Any, dimensions: int, **kwargs: Any) -> None:
    profile_vectors_resize(cursor, dimensions)


def on_reembedding(sender: Any, *, model: str, everything: bool, **kwargs: Any) -> str:
    done = profiles_reembed(model=model, everything=everything)
    return f"{done} source profile(s)" if done else ""


def connect() -> None:
    signals.source_ready.connect(on_ready, dispatch_uid="intelligence.source_ready")
    signals.source_reprocessed.connect(
        on_reprocessed, dispatch_uid="intelligence.source_reprocessed"
    )
    signals.vectors_resized.connect(on_vectors_resized, dispatch_uid="intelligence.vectors_resized")
    signals.reembedding.connect(on_reembedding, dispatch_uid="intelligence.reembedding")
