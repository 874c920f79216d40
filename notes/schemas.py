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
    note_count: int = Field(
        description="Notes not in the trash, without those that only hold a dropped file."
    )
    source_count: int = Field(0, description="Files and web pages in its live notes.")
    role: str = Field(description="Your role in it: owner, editor or viewer.")
    owner: str = Field(alias="owner.username", description="The owner's username.")
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
    author_id: int | None
    last_edited_by_id: int | None
    trashed_at: datetime | None
    created_at: datetime
    updated_at: datetime


class MemberIn(Schema):
    user: str = Field(max_length=254, description="Username or email address.")
    role: str = Field("viewer", description="viewer or editor.")


class MemberPatch(Schema):
    role: str = Field(description="viewer or editor.")


class MemberOut(Schema):
    user_id: int
    username: str = Field(alias="user.username")
    role: str
    created_at: datetime


class OwnerIn(Schema):
    user_id: int = Field(description="A member who becomes the owner; you become an editor.")
