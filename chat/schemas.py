from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Field, Schema

from chat.models import Conversation


class ConversationIn(Schema):
    notebook_id: int
    note_id: int | None = Field(None, description="Chat about this note's PDFs only.")
    title: str = Field("", max_length=200, description="Default: the first question.")


class ConversationPatch(Schema):
    title: str | None = None


class ConversationOut(Schema):
    id: int
    notebook_id: int
    note_id: int | None
    title: str
    message_count: int
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_message_count(obj: Conversation) -> int:
        # Lists annotate it (chat.selectors.conversation_list); a single conversation counts.
        count = getattr(obj, "message_count", None)
        return obj.messages.count() if count is None else int(count)


# Every field is optional so that the conversation is looked up (and refused with 404) before
# the body is judged; the service then says what is wrong with it (422).
class MessageIn(Schema):
    content: str = Field("", description="The question.")
    stream: bool = Field(
        False, description="Answer with Server-Sent Events (as does `Accept: text/event-stream`)."
    )


class MessageOut(Schema):
    id: int
    conversation_id: int
    role: str
    content: str = Field(description="The question, or the answer's Markdown with [n] markers.")
    status: str = Field(description="pending | streaming | complete | error | interrupted")
    error: str
    reply_to_id: int | None = Field(description="For an answer: the question it answers.")
    answerer: str = Field(description="llm | extractive")
    citations: list[dict[str, Any]] = Field(
        description="Verified citations: n, attachment_id, file, page, chunk_id, quote."
    )
    retrieved: list[dict[str, Any]] = Field(description="Every passage the tools returned.")
    tool_calls: list[dict[str, Any]]
    confidence: str = Field(description="high | medium | low")
    follow_ups: list[str]
    usage: dict[str, Any]
    timings: dict[str, Any] = Field(description="Seconds: retrieval, first_token, total.")
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
