from __future__ import annotations

from datetime import datetime

from ninja import Field, Schema


class NotebookIn(Schema):
    title: str = Field(max_length=1000)
    description: str = Field("", max_length=10_000)


class NotebookPatch(Schema):
    title: str | None = Field(None, max_length=1000)
    description: str | None = Field(None, max_length=10_000)


class NotebookOut(Schema):
    id: int
    title: str
    description: str
    note_count: int
    created_at: datetime
    updated_at: datetime


class NoteIn(Schema):
    title: str = Field("", max_length=1000)
    body: str = ""


class NotePatch(Schema):
    title: str | None = Field(None, max_length=1000)
    body: str | None = None


class NoteOut(Schema):
    id: int
    notebook_id: int
    title: str
    body: str
    trashed_at: datetime | None
    created_at: datetime
    updated_at: datetime
