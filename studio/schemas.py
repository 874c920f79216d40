from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema

from core.params import Id
from studio.models import StudioOutput

Kind = Literal[
    "briefing", "study_guide", "faq", "timeline", "mind_map", "flashcards", "quiz", "audio"
]


class StudioOutputIn(Schema):
    kind: Kind
    title: str = Field("", max_length=200, description="Default: the kind and what it is about.")
    attachment_ids: list[Id] | None = Field(
        None, max_length=200, description="Write it from these sources only (default: all)."
    )
    note_ids: list[Id] | None = Field(None, max_length=200)


class StudioOutputPatch(Schema):
    title: str = Field(max_length=200)


class StudioOutputOut(Schema):
    id: int
    notebook_id: int
    kind: str
    title: str
    status: str = Field(description="pending | processing | ready | failed | cancelled")
    progress: int = Field(description="Percent done; poll while pending or processing.")
    stage: str
    error: str
    scope: list[str] = Field(description='Source refs ("attachment:5", "note:3"); [] for all.')
    created_by: str | None
    generator: str = Field(
        description="offline: every statement a verified quote; llm: written by `model`, each "
        "statement checked against the quotes it cites"
    )
    model: str
    created_at: datetime
    ready_at: datetime | None
    timings: dict[str, float]
    audio_url: str | None = Field(
        description="An audio overview's MP3 (GET /api/studio/{id}/audio) once it is ready."
    )

    @staticmethod
    def resolve_audio_url(obj: StudioOutput) -> str | None:
        return f"/api/studio/{obj.pk}/audio" if obj.audio else None

    @staticmethod
    def resolve_created_by(obj: StudioOutput) -> str | None:
        return obj.created_by.get_username() if obj.created_by else None


class StudioOutputDetail(StudioOutputOut):
    content: dict[str, Any] = Field(
        description="sections (heading, items) and citations (n, file, page, quote); each "
        "item's [n] markers name a citation whose quote was found on its page. An audio "
        "overview's items are its transcript's lines (speaker 0 or 1, text, start and end in "
        "seconds; cited false for a frame), and `audio` holds its length and engine."
    )
