"""Reads of conversations and messages. A conversation is private to the user who started it
and only while its notebook is still visible to them; anything else answers Http404.

Selectors only read: callers that show answers settle abandoned ones first
(chat.answering.settle)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Count, QuerySet
from django.shortcuts import get_object_or_404

from chat.models import Conversation, ConversationSummary, Memory, Message
from notes.selectors import notebook_get, notebook_list

if TYPE_CHECKING:
    from core.types import User


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
        conversations.select_related("notebook", "note", "attachment")
        .annotate(message_count=Count("messages"))
        .order_by("-updated_at", "-pk")  # an annotated query drops Meta.ordering
    )


def conversation_get(*, user: User, conversation_id: int) -> Conversation:
    return get_object_or_404(
        _visible_conversations(user=user).select_related("notebook", "note", "attachment"),
        pk=conversation_id,
    )


def message_list(*, user: User, conversation_id: int) -> QuerySet[Message]:
    """The conversation's messages, oldest first."""
    conversation = conversation_get(user=user, conversation_id=conversation_id)
    return conversation.messages.order_by("created_at", "pk")


def message_get(*, user: User, message_id: int) -> Message:
    """One message of the user's conversations."""
    return get_object_or_404(
        Message.objects.filter(conversation__in=_visible_conversations(user=user)).select_related(
            "conversation"
        ),
        pk=message_id,
    )


def memory_list(*, user: User, notebook_id: int) -> QuerySet[Memory]:
    """The user's memories of one notebook they may see (Http404 otherwise), the most
    important first. Memories are per user: a notebook's other members never see them."""
    notebook = notebook_get(user=user, notebook_id=notebook_id)
    return Memory.objects.filter(owner=user, notebook=notebook).order_by(
        "-importance", "-created_at", "-pk"
    )


def memory_get(*, user: User, memory_id: int) -> Memory:
    """One of the user's memories, of a notebook they may still see; Http404 otherwise."""
    memories = Memory.objects.filter(owner=user, notebook__in=notebook_list(user=user))
    return get_object_or_404(memories.select_related("notebook"), pk=memory_id)


def summary_list(*, user: User, conversation_id: int) -> QuerySet[ConversationSummary]:
    """The summaries of one of the user's conversations (chat.compaction), oldest first."""
    conversation = conversation_get(user=user, conversation_id=conversation_id)
    return ConversationSummary.objects.filter(conversation=conversation).order_by(
        "first_message_id"
    )
