"""Running generation outside the request or socket that asked for it.

`start(message_id)` generates in a background thread of this process and publishes every event
to the conversation's channel-layer group, so any open page (or several) can follow it, and a
closed tab loses nothing: the message is saved as it grows and when it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections
from django.utils import translation

from chat.agent import Emit, generate
from chat.models import Message

logger = logging.getLogger(__name__)


def group_name(conversation_id: int) -> str:
    return f"chat.{conversation_id}"


_server_loop: asyncio.AbstractEventLoop | None = None


def remember_loop() -> None:
    """Called on the server's event loop (by the consumer): publishing happens there."""
    global _server_loop
    _server_loop = asyncio.get_running_loop()


def publish(
    conversation_id: int, event: str, data: dict[str, Any], *, kind: str = "chat.event"
) -> None:
    """Send one event to every socket following the conversation.

    The in-memory channel layer's queues belong to the server's event loop: a send from
    another loop (async_to_sync in this thread) would queue the event without waking the
    consumer, so when the server's loop is known the send runs on it."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": kind, "event": event, "data": data, **(data if kind != "chat.event" else {})}
    loop = _server_loop
    try:
        if loop is not None and loop.is_running() and not loop.is_closed():
            future = asyncio.run_coroutine_threadsafe(
                layer.group_send(group_name(conversation_id), message), loop
            )
            future.result(timeout=10)
        else:
            async_to_sync(layer.group_send)(group_name(conversation_id), message)
    except Exception:  # a full or unreachable layer must not stop the answer being saved
        logger.warning(
            "could not publish %s for conversation %s", event, conversation_id, exc_info=True
        )


def run(
    message_id: int, conversation_id: int, also: Emit | None = None, question_id: int | None = None
) -> None:
    """Show the question (if new) and the pending answer in every open page of the
    conversation, then generate and publish (and hand events to `also`); the thread's
    database connection is closed afterwards."""
    show = {"question_id": question_id, "answer_id": message_id}
    publish(conversation_id, "show", show, kind="chat.show")

    def emit(event: str, data: dict[str, Any]) -> None:
        publish(conversation_id, event, data)
        if also is not None:
            also(event, data)

    try:
        if generate(message_id, emit) is None:
            emit(
                "error",
                {
                    "message_id": message_id,
                    "message": "This answer is already being written; reload to follow it.",
                },
            )
    except Exception:
        logger.exception("generation of message %s crashed", message_id)

        Message.objects.filter(
            pk=message_id, status__in=(Message.Status.PENDING, Message.Status.STREAMING)
        ).update(status=Message.Status.ERROR, error="Generation crashed. Try again.")
        emit("error", {"message_id": message_id, "message": "Generation crashed. Try again."})
    finally:
        connections.close_all()


def start(
    message_id: int, conversation_id: int, also: Emit | None = None, question_id: int | None = None
) -> threading.Thread:
    """Generate in a background thread of this process (it outlives the request or socket).
    Called by chat.answering once the question is saved; `question_id` for a new question,
    None for a retry."""
    # Called on the server's loop (the consumer): remember it. From a sync view (no loop in
    # this thread) the loop a consumer remembered is used, if any.
    with contextlib.suppress(RuntimeError):
        remember_loop()
    # The answer's own words (the offline answer's frame, an abstention) are written in the
    # language of the page or request that asked.
    language = translation.get_language() or settings.LANGUAGE_CODE

    def run_in_language() -> None:
        with translation.override(language):
            run(message_id, conversation_id, also, question_id)

    thread = threading.Thread(
        target=run_in_language,
        name=f"answer-{message_id}",
        daemon=True,
    )
    thread.start()
    return thread


class Listener:
    """Pass as `also` when starting an answer (chat.answering) to read its events until `done`
    or `error` (for SSE). If the reader goes away, even before reading anything, the answer is
    generated and saved all the same."""

    def __init__(self, timeout: float = 600) -> None:
        self.queue: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self.timeout = timeout

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        self.queue.put((event, data))

    def events(self, message_id: int) -> Iterator[tuple[str, dict[str, Any]]]:
        while True:
            try:
                event, data = self.queue.get(timeout=self.timeout)
            except queue.Empty:
                yield "error", {"message_id": message_id, "message": "The answer timed out."}
                return
            yield event, data
            if event in ("done", "error"):
                return
