"""Generating one answer: pick the answerer (chat model or extractive), run it with the tools
of this chat, stream its events out, verify its citations and save everything on the message.

`generate(message_id, emit)` is the one path for the page (WebSocket), the API (SSE) and the
evaluation command. It claims the message (pending → streaming) so an answer is generated
once, whoever asks; it saves the growing text as it streams, so a reload shows it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from django.conf import settings

from chat.citations import verify
from chat.events import AnswerError, Event, Finished, Token, ToolActivity
from chat.models import Message
from chat.tools import ToolContext

logger = logging.getLogger(__name__)
Emit = Callable[[str, dict[str, Any]], None]
SAVE_EVERY = 0.5  # seconds between saves of a streaming answer
HISTORY_TURNS = 6  # earlier messages the answerer sees


class Answerer(Protocol):
    name: str  # "llm" | "extractive"

    def run(
        self, question: str, history: list[tuple[str, str]], context: ToolContext
    ) -> Iterator[Event]: ...


def get_answerer() -> Answerer:
    """The chat model when CHAT_MODEL is set, else the offline extractive answerer."""
    if settings.CHAT_MODEL:
        from chat.llm import LLMAnswerer

        return LLMAnswerer()
    from chat.extractive import ExtractiveAnswerer

    return ExtractiveAnswerer()


def _history(message: Message) -> list[tuple[str, str]]:
    earlier = (
        Message.objects.filter(conversation_id=message.conversation_id, pk__lt=message.pk)
        .exclude(pk=message.reply_to_id or 0)
        .filter(status=Message.Status.COMPLETE)
        .order_by("-pk")
        .values_list("role", "content")[:HISTORY_TURNS]
    )
    return [(role, content) for role, content in reversed(earlier)]


def claim(message_id: int) -> bool:
    """pending → streaming, once: a second caller (reconnect, retry click) gets False."""
    return bool(
        Message.objects.filter(
            pk=message_id, role=Message.Role.ASSISTANT, status=Message.Status.PENDING
        ).update(status=Message.Status.STREAMING)
    )


def generate(message_id: int, emit: Emit, answerer: Answerer | None = None) -> Message | None:
    """Generate the answer of a pending assistant message; None if it was not pending."""
    if not claim(message_id):
        return None
    message = Message.objects.select_related(
        "conversation__owner", "conversation__notebook", "conversation__note", "reply_to"
    ).get(pk=message_id)
    conversation = message.conversation
    answerer = answerer or get_answerer()
    context = ToolContext(
        user=conversation.owner,
        notebook=conversation.notebook,
        note=conversation.note,
        conversation=conversation,
    )
    question = message.reply_to.content if message.reply_to else ""
    started = time.perf_counter()
    timings: dict[str, float] = {"retrieval": 0.0}
    parts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    last_save = started
    finished = Finished()
    message.answerer = answerer.name

    def save(**extra: Any) -> None:
        Message.objects.filter(pk=message.pk).update(
            content="".join(parts), tool_calls=tool_calls, answerer=answerer.name, **extra
        )

    try:
        for event in answerer.run(question, _history(message), context):
            if isinstance(event, Token):
                if not parts:
                    timings["first_token"] = round(time.perf_counter() - started, 3)
                parts.append(event.text)
                emit("token", {"message_id": message.pk, "text": event.text})
                if time.perf_counter() - last_save > SAVE_EVERY:
                    save()
                    last_save = time.perf_counter()
            elif isinstance(event, ToolActivity):
                timings["retrieval"] += event.seconds
                call = {"name": event.name, "arguments": event.arguments,
                        "summary": event.summary, "results": event.results}  # fmt: skip
                tool_calls.append(call)
                emit("tool", {"message_id": message.pk, **call})
                save()
            elif isinstance(event, Finished):
                finished = event
    except AnswerError as exc:
        return _fail(message, str(exc), parts, tool_calls, emit)
    except Exception:
        logger.exception("answer %s failed", message.pk)
        return _fail(message, "Something went wrong while answering.", parts, tool_calls, emit)

    content = "".join(parts)
    citations, refused = verify(content, context.sources, finished.quotes)
    timings["retrieval"] = round(timings["retrieval"], 3)
    timings["total"] = round(time.perf_counter() - started, 3)
    timings.setdefault("first_token", timings["total"])
    for citation in citations:
        emit("citation", {"message_id": message.pk, **citation})
    metadata = {"unverified_citations": refused, "abstained": finished.abstained}
    Message.objects.filter(pk=message.pk).update(
        content=content,
        status=Message.Status.COMPLETE,
        answerer=answerer.name,
        citations=citations,
        retrieved=[_retrieved(source) for source in context.sources],
        tool_calls=tool_calls,
        confidence=finished.confidence,
        follow_ups=finished.follow_ups[:3],
        usage=finished.usage,
        timings=timings,
        metadata=metadata,
    )
    conversation.save(update_fields=["updated_at"])
    emit(
        "done",
        {
            "message_id": message.pk,
            "usage": finished.usage,
            "confidence": finished.confidence,
            "follow_ups": finished.follow_ups[:3],
            "citations": citations,
            "unverified_citations": refused,
            "timings": timings,
        },
    )
    message.refresh_from_db()
    return message


def _retrieved(source: dict[str, Any]) -> dict[str, Any]:
    keys = ("n", "kind", "id", "score", "lexical", "vector", "attachment_id", "file", "page",
            "note_id")  # fmt: skip
    return {key: source[key] for key in keys if key in source}


def _fail(
    message: Message, error: str, parts: list[str], tool_calls: list[dict[str, Any]], emit: Emit
) -> Message:
    Message.objects.filter(pk=message.pk).update(
        status=Message.Status.ERROR,
        error=error,
        content="".join(parts),
        tool_calls=tool_calls,
    )
    emit("error", {"message_id": message.pk, "message": error})
    message.refresh_from_db()
    return message
