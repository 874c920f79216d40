from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Field, Schema

from chat.models import Conversation
from core.params import Id


class ConversationIn(Schema):
    notebook_id: Id
    note_id: Id | None = Field(None, description="Chat about this note's PDFs only.")
    attachment_id: Id | None = Field(
        None,
        description="Ask this PDF: chat about this one ready file (the notebook must be its "
        "notebook; `note_id` is ignored). Titled after the file unless `title` says otherwise.",
    )
    title: str = Field("", max_length=200, description="Default: the first question.")


class ConversationPatch(Schema):
    title: str | None = None
    mode: str | None = Field(None, description="exploring | research | learning")


class ConversationOut(Schema):
    id: int
    notebook_id: int
    note_id: int | None
    attachment_id: int | None = Field(description="Ask this PDF: the one file it is about.")
    title: str
    mode: str = Field(description="exploring | research | learning: the default for questions")
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
    mode: str = Field(
        "",
        description="exploring | research | learning (default: the conversation's mode, "
        "which the question's mode then becomes).",
    )
    stream: bool = Field(
        False, description="Answer with Server-Sent Events (as does `Accept: text/event-stream`)."
    )
    selections: list[dict[str, Any]] = Field(
        default_factory=list,
        description='Sources chosen for this question, as the composer\'s chips: `{"kind": '
        '"file"|"path", "mode": "markdown"|"all", "ref": "note:3"|"attachment:5"|'
        '"notebook:2"}`. The question is answered from them (plus, for a follow-up, the '
        "sources earlier answers cited). A folder (notebook) of more than 200 sources is "
        "refused (422).",
    )
    excluded: list[str] = Field(
        default_factory=list,
        description='Sources deselected ("attachment:5", "note:3"): never used, not even '
        "carried over from earlier answers.",
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
    mode: str = Field(description="A question: the mode it was asked in.")
    search_query: str = Field(
        description="A question: what retrieval searched for it (its reformulation when it "
        "follows up an earlier question; empty until its answer starts)."
    )
    is_follow_up: bool = Field(description="A question: whether it was read as a follow-up.")
    anchors: list[int] = Field(
        description="A follow-up: attachment ids of the documents behind the previous answer, "
        "whose passages were boosted."
    )
    explicit_selections: list[dict[str, Any]] = Field(
        description="A question: the sources chosen for it (kind, mode, ref, name, path, "
        "source_ids, subfile_count); an answer's `metadata.source_summary` says how many were "
        "used (explicit_selected_count, carried_over_count, excluded_count)."
    )
    excluded_sources: list[str] = Field(description="A question: the sources deselected.")
    created_at: datetime
    updated_at: datetime


class MemoryOut(Schema):
    id: int
    notebook_id: int
    kind: str = Field(description="fact | preference | insight")
    text: str = Field(description="Untrusted text drawn from a chat: escape it where you show it.")
    importance: float = Field(description="0 to 1.")
    source_message_id: int | None = Field(description="The answer it was drawn from, if kept.")
    created_at: datetime
    updated_at: datetime


class MemoriesForgotten(Schema):
    deleted: int


class SummaryOut(Schema):
    id: int
    conversation_id: int
    text: str = Field(description="What the model reads instead of the summarised messages.")
    first_message_id: int
    last_message_id: int
    message_count: int
    summarizer: str = Field(description="llm | extractive")
    created_at: datetime


class CompactionOut(Schema):
    compacted: int = Field(description="Messages summarised by this request.")
    created: int = Field(description="Summaries written by this request.")
    remaining: int = Field(
        description="Messages left to compact in the background (a chat model summarises a "
        "few batches while you wait)."
    )
    busy: bool = Field(description="Another compaction of this conversation was running.")
    summaries: list[SummaryOut] = Field(description="All the conversation's summaries.")
