"""django-q2 entry points: thin, call one service."""

from __future__ import annotations

import logging

from chat import services
from chat.memory import memory_extract
from chat.models import Message


def interrupt_abandoned_answers() -> int:
    """Periodic: answers left pending or streaming by a web process that died become
    interrupted (with Retry) instead of "still being written" forever."""
    return services.message_interrupt_abandoned()


def extract_memories(message_id: int | str) -> None:
    """After an answer completed: remember what its exchange holds (chat.memory). Gone, or
    not a completed answer: logged, nothing done. Never raises (failures are counted)."""

    message = (
        Message.objects.filter(
            pk=int(message_id), role=Message.Role.ASSISTANT, status=Message.Status.COMPLETE
        )
        .select_related("conversation__owner", "conversation__notebook", "reply_to")
        .first()
    )
    if message is None:
        logging.getLogger(__name__).info("memory extraction: answer %s is gone", message_id)
        return
    memory_extract(message=message)
