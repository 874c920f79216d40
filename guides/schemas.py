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
    lead: bool = False  # a quote of the document's own abstract or introduction
    citations: list[GuideCitationOut]


class OutlineEntryOut(Schema):
    text: str
    level: int
    page: int
    attachment_id: int
    file: str


class SuggestedQuestionOut(Schema):
    text: str  # in English; the pages show it in the reader's language
    template: str = ""  # section | definition: the kind of question, "" for a model's own
    subject: str = ""  # the heading or phrase it asks about (the model's question: all of it)
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
