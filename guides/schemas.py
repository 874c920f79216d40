from __future__ import annotations

from datetime import datetime

from ninja import Schema


class GuideCitationOut(Schema):
    attachment_id: int
    file: str
    page: int
    quote: str


class GuideSentenceOut(Schema):
    text: str
    quoted: bool  # True: the sentence is itself a verbatim quote of the source
    citations: list[GuideCitationOut]


class OutlineEntryOut(Schema):
    text: str
    level: int
    page: int
    attachment_id: int
    file: str


class SuggestedQuestionOut(Schema):
    text: str
    attachment_id: int  # where retrieval found the passage that answers it
    file: str
    page: int
    chunk_id: int


class GuideSourceOut(Schema):
    attachment_id: int
    file: str


class GuideOut(Schema):
    kind: str  # source | notebook
    status: str  # none | pending | processing | ready | failed
    generator: str  # offline | llm ("" before it was written)
    model: str
    stale: bool  # being rewritten for changed sources; the content is the previous guide's
    error: str
    title: str
    summary: list[GuideSentenceOut]
    topics: list[str]
    outline: list[OutlineEntryOut]
    questions: list[SuggestedQuestionOut]
    sources: list[GuideSourceOut]
    ready_at: datetime | None
