"""Reads of conversations and messages. A conversation is private to the user who started it
and only while its notebook is still visible to them; anything else answers Http404.

Reading messages first settles the conversation's abandoned answers (interrupted, see
chat.services.message_interrupt_abandoned), so that a page, a poll or the API never shows an
answer as still being written after the process writing it died, even without a worker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Count, QuerySet
from django.shortcuts import get_object_or_404

from chat.models import Conversation, Message
from chat.services import message_interrupt_abandoned
from notes.selectors import notebook_list

IN_PROGRESS = (Message.Status.PENDING, Message.Status.STREAMING)

if TYPE_CHECKING:
    from notebook.types import User


def _visible_conversations(*, user: User) -> QuerySet[Conversation]:
    return Conversation.objects.filter(owner=user, notebook__in=notebook_list(user=user))


def conversation_list(
    *, user: User, notebook_id: int | None = None, note_id: int | None = None
) -> QuerySet[Conversation]:
    """The user's conversations, newest first, with `message_count`; optionally of one
    notebook or one note."""
    conversations = _visible_conversations(user=user)
    if notebook_id is not None:
        conversations = conversations.filter(notebook_id=notebook_id)
    if note_id is not None:
        conversations = conversations.filter(note_id=note_id)
    return (
        conversations.select_related("notebook", "note")
        .annotate(message_count=Count("messages"))
        .order_by("-updated_at", "-pk")  # an annotated query drops Meta.ordering
    )


def conversation_get(*, user: User, conversation_id: int) -> Conversation:
    return get_object_or_404(
        _visible_conversations(user=user).select_related("notebook", "note"), pk=conversation_id
    )


def message_list(*, user: User, conversation_id: int) -> QuerySet[Message]:
    """The conversation's messages, oldest first (abandoned answers settled first)."""
    conversation = conversation_get(user=user, conversation_id=conversation_id)
    message_interrupt_abandoned(conversation_id=conversation.pk)
    return conversation.messages.order_by("created_at", "pk")


def message_get(*, user: User, message_id: int) -> Message:
    """One message of the user's conversations (an abandoned answer settled first)."""
    message = get_object_or_404(
        Message.objects.filter(conversation__in=_visible_conversations(user=user)).select_related(
            "conversation"
        ),
        pk=message_id,
    )
    in_progress = message.role == Message.Role.ASSISTANT and message.status in IN_PROGRESS
    if in_progress and message_interrupt_abandoned(conversation_id=message.conversation_id):
        message.refresh_from_db()
    return message
