"""REST endpoints for chat: conversations, their messages, and asking (JSON or Server-Sent
Events). Every handler reads through chat.selectors or notes.selectors with request.user."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db.models import QuerySet
from django.http import Http404, StreamingHttpResponse
from ninja import Router, Status
from ninja.pagination import paginate
from ninja.params.functions import Query as query_param

from attachments.selectors import attachment_get
from chat import answering, compaction, memory, runner, selection, selectors, services
from chat.models import Conversation, ConversationSummary, Memory, Message
from chat.schemas import (
    CompactionOut,
    ConversationIn,
    ConversationOut,
    ConversationPatch,
    MemoriesForgotten,
    MemoryOut,
    MessageIn,
    MessageOut,
    SummaryOut,
)
from core.params import Id, Pagination, path_id, query_id
from core.types import AuthenticatedHttpRequest
from notes.selectors import note_get, notebook_get

router = Router(tags=["chat"])

Events = Iterator[tuple[str, dict[str, Any]]]
SSE_TYPES = ["application/json", "text/event-stream"]  # JSON first: `*/*` means JSON
# Under ASGI each open event stream waits for its next event in one of these threads (created
# as needed), kept apart from the loop's default executor so that streams cannot starve it.
STREAM_WAITERS = ThreadPoolExecutor(max_workers=256, thread_name_prefix="sse")


@router.get("/conversations", response=list[ConversationOut])
@paginate(Pagination)
def list_conversations(
    request: AuthenticatedHttpRequest,
    notebook_id: int | None = query_id(),
    note_id: int | None = query_id(),
) -> QuerySet[Conversation]:
    """Your conversations, most recently active first; optionally of one notebook or note."""
    # (Plain parameters, not a Query schema: @paginate's wrapper cannot resolve the names of
    # this module's annotations.) Filters name objects: each must be the user's own (404
    # otherwise), like every other route.
    if notebook_id is not None:
        notebook_get(user=request.user, notebook_id=notebook_id)
    if note_id is not None:
        note_get(user=request.user, note_id=note_id)
    conversations = selectors.conversation_list(
        user=request.user, notebook_id=notebook_id, note_id=note_id
    )
    # Meta.ordering does not apply to the selector's GROUP BY (message_count): order here so
    # that pages are stable.
    return conversations.order_by("-updated_at", "-pk")


@router.post("/conversations", response={201: ConversationOut})
def create_conversation(
    request: AuthenticatedHttpRequest, payload: ConversationIn
) -> Status[Conversation]:
    """Start a conversation about a notebook (its notes and PDFs), with `note_id` about one
    note's PDFs (422 if that note is in another notebook), or with `attachment_id` about one
    ready PDF (Ask this PDF; 422 while it is not ready)."""
    notebook = notebook_get(user=request.user, notebook_id=payload.notebook_id)
    if payload.attachment_id is not None:
        attachment = attachment_get(user=request.user, attachment_id=payload.attachment_id)
        if attachment.note.notebook_id != notebook.pk or attachment.note.is_trashed:
            raise Http404("No such file in this notebook.")
        conversation = services.conversation_about_file(owner=request.user, attachment=attachment)
        if payload.title.strip():
            conversation = services.conversation_rename(
                conversation=conversation, title=payload.title
            )
        return Status(201, conversation)
    note = None if payload.note_id is None else note_get(user=request.user, note_id=payload.note_id)
    conversation = services.conversation_create(
        owner=request.user, notebook=notebook, note=note, title=payload.title
    )
    return Status(201, conversation)


@router.get("/conversations/{conversation_id}", response=ConversationOut)
def retrieve_conversation(request: AuthenticatedHttpRequest, conversation_id: Id) -> Conversation:
    return selectors.conversation_get(user=request.user, conversation_id=conversation_id)


@router.patch("/conversations/{conversation_id}", response=ConversationOut)
def update_conversation(
    request: AuthenticatedHttpRequest, conversation_id: Id, payload: ConversationPatch
) -> Conversation:
    conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
    if payload.title is not None:
        services.conversation_rename(conversation=conversation, title=payload.title)
    if payload.mode is not None:
        services.conversation_set_mode(conversation=conversation, mode=payload.mode)
    return conversation


@router.delete("/conversations/{conversation_id}", response={204: None})
def delete_conversation(request: AuthenticatedHttpRequest, conversation_id: Id) -> Status[None]:
    """Delete a conversation with all its messages."""
    conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
    services.conversation_delete(conversation=conversation)
    return Status(204, None)


@router.get("/conversations/{conversation_id}/messages", response=list[MessageOut])
@paginate(Pagination)
def list_messages(
    request: AuthenticatedHttpRequest, conversation_id: int = path_id()
) -> QuerySet[Message]:
    """Questions and answers, oldest first, with everything saved on each answer."""
    conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
    answering.settle(conversation_id=conversation.pk)
    return selectors.message_list(user=request.user, conversation_id=conversation.pk)


@router.post("/conversations/{conversation_id}/messages", response={201: MessageOut})
def create_message(
    request: AuthenticatedHttpRequest, conversation_id: Id, payload: MessageIn
) -> Status[Message] | StreamingHttpResponse:
    """Ask a question. By default, wait and get the finished answer (201; check its `status`).
    With `Accept: text/event-stream` or `"stream": true`, get Server-Sent Events instead:
    `message` (question_id, message_id), `searched` (the query searched, whether the question
    was read as a follow-up, the anchor documents), then `tool`, `token` and `citation`
    events, ending with `done` or `error`. The answer is saved even if you stop reading.
    Too many questions a minute: 429 with Retry-After, nothing saved."""
    conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
    # The same row as request.user (the selector checked), but this object carries a token's
    # scope: the question's chosen sources resolve against it (chat.selection).
    conversation.owner = request.user
    listener = runner.Listener()
    try:
        question, answer = answering.ask(
            user=request.user,
            conversation=conversation,
            content=payload.content,
            mode=payload.mode,
            selections=payload.selections,
            excluded=payload.excluded,
            also=listener,
        )
    except selection.SourceUnavailable as exc:  # like any other id naming another's object
        raise Http404(exc.messages[0]) from exc
    if _wants_stream(request, payload.stream):
        return _event_stream(request, answer, listener, question_id=question.pk)
    return Status(201, _finished(request, answer, listener))


@router.post("/messages/{message_id}/retry", response=MessageOut)
def retry_message(
    request: AuthenticatedHttpRequest,
    message_id: Id,
    stream: bool = False,
    continue_answer: bool = query_param(False, alias="continue"),
) -> Message | StreamingHttpResponse:
    """Answer again a question whose answer failed, was interrupted or was cut short (409
    otherwise); with `?continue=true`, continue a cut-short answer from where it stopped. The
    finished answer, or Server-Sent Events with `?stream=true` or `Accept: text/event-stream`
    (as when asking). No body. A retry spends a question of the same budget as asking (429
    with Retry-After beyond it)."""
    message = answering.settled(selectors.message_get(user=request.user, message_id=message_id))
    listener = runner.Listener()
    answer = answering.retry(
        user=request.user, message=message, continue_answer=continue_answer, also=listener
    )
    if _wants_stream(request, stream):
        return _event_stream(request, answer, listener, question_id=answer.reply_to_id)
    return _finished(request, answer, listener)


def _wants_stream(request: AuthenticatedHttpRequest, flag: bool) -> bool:
    return flag or request.get_preferred_type(SSE_TYPES) == "text/event-stream"


def _finished(
    request: AuthenticatedHttpRequest, answer: Message, listener: runner.Listener
) -> Message:
    """Wait until the answer is done (or failed, or timed out while the generation goes on),
    then read it back as saved."""
    for _event in listener.events(answer.pk):
        pass
    return selectors.message_get(user=request.user, message_id=answer.pk)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    # json.dumps escapes newlines, so each event's data is one `data:` line.
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _event_stream(
    request: AuthenticatedHttpRequest,
    answer: Message,
    listener: runner.Listener,
    *,
    question_id: int | None,
) -> StreamingHttpResponse:
    opening = _sse(
        "message",
        {
            "conversation_id": answer.conversation_id,
            "question_id": question_id,
            "message_id": answer.pk,
        },
    )
    events = listener.events(answer.pk)
    # Django buffers a sync iterator whole under ASGI (and an async one under WSGI): give each
    # server the kind it streams.
    content: Iterator[bytes] | AsyncIterator[bytes]
    if isinstance(request, ASGIRequest):
        content = _async_frames(opening, events)
    else:
        content = _sync_frames(opening, events)
    response = StreamingHttpResponse(content, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx would otherwise hold the tokens back
    return response


def _sync_frames(opening: bytes, events: Events) -> Iterator[bytes]:
    yield opening
    for event, data in events:
        yield _sse(event, data)


def _next_event(events: Events) -> tuple[str, dict[str, Any]] | None:
    return next(events, None)


async def _async_frames(opening: bytes, events: Events) -> AsyncIterator[bytes]:
    yield opening
    # Waiting for the next event blocks on a queue: do it in a waiter thread, never on the
    # event loop. If the client goes away the task is cancelled here; generation goes on.
    pull = sync_to_async(_next_event, thread_sensitive=False, executor=STREAM_WAITERS)
    while (item := await pull(events)) is not None:
        yield _sse(*item)


# --- Memories (chat.memory): per user and notebook ---------------------------------------------


@router.get("/notebooks/{notebook_id}/memories", response=list[MemoryOut], tags=["memories"])
@paginate(Pagination)
def list_memories(
    request: AuthenticatedHttpRequest, notebook_id: int = path_id()
) -> QuerySet[Memory]:
    """What your chats in this notebook remember about you (at most 50), most important
    first. Only you see your memories."""
    return selectors.memory_list(user=request.user, notebook_id=notebook_id)


@router.delete("/memories/{memory_id}", response={204: None}, tags=["memories"])
def delete_memory(request: AuthenticatedHttpRequest, memory_id: Id) -> Status[None]:
    """Forget one memory."""
    memory.memory_delete(memory=selectors.memory_get(user=request.user, memory_id=memory_id))
    return Status(204, None)


@router.delete("/notebooks/{notebook_id}/memories", response=MemoriesForgotten, tags=["memories"])
def forget_memories(request: AuthenticatedHttpRequest, notebook_id: Id) -> dict[str, int]:
    """Forget everything your chats in this notebook remember; how many memories went."""
    notebook = notebook_get(user=request.user, notebook_id=notebook_id)
    return {"deleted": memory.memory_forget_all(owner=request.user, notebook=notebook)}


# --- Compaction (chat.compaction): summaries of older messages ---------------------------------


@router.get("/conversations/{conversation_id}/summaries", response=list[SummaryOut])
def list_summaries(
    request: AuthenticatedHttpRequest, conversation_id: Id
) -> QuerySet[ConversationSummary]:
    """The summaries of the conversation's older messages, oldest first: what the chat model
    reads instead of those messages (they stay readable in full through `/messages`)."""
    return selectors.summary_list(user=request.user, conversation_id=conversation_id)


@router.post("/conversations/{conversation_id}/compact", response=CompactionOut)
def compact_conversation(request: AuthenticatedHttpRequest, conversation_id: Id) -> dict[str, Any]:
    """Summarise the older messages now (all but the last 10, never an answer still being
    written), in batches of 20; with a chat model, a few batches while you wait and the rest
    in the background. Idempotent: nothing to compact answers `compacted: 0`."""
    conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
    done = compaction.conversation_compact_now(conversation=conversation)
    summaries = selectors.summary_list(user=request.user, conversation_id=conversation.pk)
    return {"compacted": done.compacted, "created": done.summaries, "remaining": done.remaining,
            "busy": done.busy, "summaries": list(summaries)}  # fmt: skip
