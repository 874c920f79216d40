"""Reads of conversations and messages. A conversation is private to the user who started it
and only while its notebook is still visible to them; anything else answers Http404."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Count, QuerySet
from django.shortcuts import get_object_or_404

from chat.models import Conversation, Message
from notes.selectors import notebook_list

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
    conversation = conversation_get(user=user, conversation_id=conversation_id)
    return conversation.messages.order_by("created_at", "pk")


def message_get(*, user: User, message_id: int) -> Message:
    return get_object_or_404(
        Message.objects.filter(conversation__in=_visible_conversations(user=user)).select_related(
            "conversation"
        ),
        pk=message_id,
    )
