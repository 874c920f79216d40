"""Writes of conversations and messages. Callers pass objects fetched through the selectors
(chat.selectors, notes.selectors), which already checked that the user may see them."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now
from django.utils import translation
from django.utils.formats import number_format
from django.utils.translation import gettext as _

from attachments.models import NoteAttachment
from chat import modes, selection
from chat.models import Conversation, Message
from core.params import CONTROL_CHARACTERS_REFUSED, has_control_characters
from core.textutil import clip
from notes.models import Note, Notebook

if TYPE_CHECKING:
    from core.types import User

logger = logging.getLogger(__name__)
TITLE_CHARS = 80
# An answer in progress whose `updated_at` is older than this lost the process writing it: a
# live generation touches it every chat.agent.HEARTBEAT_SECONDS, whatever the model is doing.
ABANDONED_AFTER_SECONDS = 60.0
INTERRUPTED_REASON = (
    "The server stopped while this answer was being written (it restarted or crashed). "
    "Retry to answer again."
)


def _clean_question(text: str) -> str:
    question = text.strip()
    if not question:
        raise ValidationError({"content": ValidationError(_("Type a question first."), "required")})
    if len(question) > settings.CHAT_QUESTION_MAX_CHARS:
        message = _("Keep the question under %(limit)s characters (this one has %(length)s).") % {
            "limit": number_format(settings.CHAT_QUESTION_MAX_CHARS, force_grouping=True),
            "length": number_format(len(question), force_grouping=True),
        }
        raise ValidationError({"content": ValidationError(message, "too_long")})
    if has_control_characters(question):  # pages and the API refuse them earlier; a socket here
        message = str(CONTROL_CHARACTERS_REFUSED)
        raise ValidationError({"content": ValidationError(message, "control_characters")})
    return question


def conversation_create(
    *, owner: User, notebook: Notebook, note: Note | None = None, title: str = ""
) -> Conversation:
    """Start a conversation about a notebook, or about one note's PDFs."""
    if note is not None and note.notebook_id != notebook.pk:
        raise ValidationError(_("That note is not in this notebook."))
    default = _default_title(note.title if note else notebook.title)
    return Conversation.objects.create(
        owner=owner, notebook=notebook, note=note, title=(title.strip() or default)[:200]
    )


def conversation_about_file(*, owner: User, attachment: NoteAttachment) -> Conversation:
    """ "Ask this PDF": a conversation scoped to one ready file, titled after it (its note is
    set too: should the file be deleted, the chat keeps the note's PDFs)."""
    if attachment.status != NoteAttachment.Status.READY:
        raise ValidationError(
            _("“%(name)s” is not ready yet: ask it once it has been read.")
            % {"name": attachment.original_name},
            code="not_ready",
        )
    note = attachment.note
    return Conversation.objects.create(
        owner=owner, notebook=note.notebook, note=note, attachment=attachment,
        title=attachment.original_name[:200],
    )  # fmt: skip


def _default_title(about: str) -> str:
    """A new conversation's title until its first question names it, in the active language."""
    return _("About %(title)s") % {"title": about}


def _untitled(conversation: Conversation) -> bool:
    """Whether the conversation still has its default title, in any interface language (the
    first question then becomes its title)."""
    if conversation.title.startswith("About "):
        return True
    about = conversation.note.title if conversation.note else conversation.notebook.title
    defaults = set()
    for code, _name in settings.LANGUAGES:
        with translation.override(code):
            defaults.add(_default_title(about)[:200])
    return conversation.title in defaults


def conversation_rename(*, conversation: Conversation, title: str) -> Conversation:
    title = title.strip()
    if not title:
        raise ValidationError({"title": _("Give it a title.")}, code="required")
    if len(title) > 200:
        raise ValidationError({"title": _("Keep the title under 200 characters.")})
    conversation.title = title
    conversation.save(update_fields=["title", "updated_at"])
    return conversation


def conversation_set_mode(*, conversation: Conversation, mode: str) -> Conversation:
    if not modes.valid(mode):
        choices = ", ".join(modes.MODES)
        message = _("Choose a mode: %(choices)s.") % {"choices": choices}
        raise ValidationError({"mode": ValidationError(message, "invalid")})
    conversation.mode = mode
    conversation.save(update_fields=["mode", "updated_at"])
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    conversation.delete()


def ready_documents(conversation: Conversation) -> bool:
    """Whether anything in the conversation's scope can be searched: a ready PDF (or, for a
    notebook chat, a note with text)."""
    if conversation.attachment_id is not None:
        return NoteAttachment.objects.filter(pk=conversation.attachment_id, status="ready").exists()
    notes = Note.objects.filter(notebook=conversation.notebook, trashed_at__isnull=True)
    if conversation.note_id is not None:
        notes = notes.filter(pk=conversation.note_id)
    if NoteAttachment.objects.filter(note__in=notes, status="ready").exists():
        return True
    return conversation.note_id is None and notes.exclude(body="").exists()


def message_ask(
    *, conversation: Conversation, content: str, mode: str = "",
    selections: object = None, excluded: object = None,
) -> tuple[Message, Message]:  # fmt: skip
    """Save the question (in `mode`, default the conversation's, which it then becomes) and a
    pending answer to it; the caller starts generation (chat.answering). `selections` and
    `excluded` are the sources the user chose and deselected (chat.selection; JSON text or
    lists), resolved against the conversation's owner and stored on the question. Refuses
    empty or over-long questions, an unknown mode, unreadable, foreign or oversized
    selections, and a scope with nothing to search."""
    question = _clean_question(content)
    chips = selection.parse(selections, excluded)
    chosen = selection.resolve_all(user=conversation.owner, chips=chips)
    mode = mode or conversation.mode
    if not modes.valid(mode):
        choices = ", ".join(modes.MODES)
        message = _("Choose a mode: %(choices)s.") % {"choices": choices}
        raise ValidationError({"mode": ValidationError(message, "invalid")})
    if not any(c.source_ids for c in chosen) and not ready_documents(conversation):
        message = _(
            "There is nothing to search here yet: attach a PDF and wait until it is ready "
            "(or write a note)."
        )
        raise ValidationError({"content": ValidationError(message, "no_documents")})
    with transaction.atomic():
        asked = Message.objects.create(
            conversation=conversation,
            role=Message.Role.USER,
            content=question,
            mode=mode,
            explicit_selections=[c.stored() for c in chosen],
            excluded_sources=chips.excluded,
        )
        answer = Message.objects.create(
            conversation=conversation,
            role=Message.Role.ASSISTANT,
            status=Message.Status.PENDING,
            reply_to=asked,
        )
        if conversation.messages.count() == 2 and _untitled(conversation):
            conversation.title = clip(question.strip(), TITLE_CHARS)
        conversation.mode = mode
        conversation.save(update_fields=["title", "mode", "updated_at"])
    return asked, answer


def message_retriable(message: Message) -> bool:
    """Whether Retry is offered: the answer failed, was interrupted, or stopped at the
    answer length limit (complete, but cut short)."""
    if message.status in (Message.Status.ERROR, Message.Status.INTERRUPTED):
        return True
    return message.status == Message.Status.COMPLETE and bool(
        (message.metadata or {}).get("cut_short")
    )


def message_retry(*, message: Message, continue_answer: bool = False) -> Message:
    """Re-run a failed, interrupted or cut-short answer: it becomes pending again, cleared.
    With `continue_answer`, a cut-short answer is continued instead: its text so far is kept
    (in `metadata.continue_from`) and the model writes on from where it stopped."""
    if message.role != Message.Role.ASSISTANT or not message_retriable(message):
        raise ValidationError(
            _("Only a failed, interrupted or cut-short answer can be retried."), code="state"
        )
    cut_short = bool((message.metadata or {}).get("cut_short"))
    if continue_answer and not cut_short:
        raise ValidationError(
            _("Only an answer that was cut short can be continued."), code="state"
        )
    so_far = message.content if continue_answer else ""
    updated = Message.objects.filter(pk=message.pk, status=message.status).update(
        status=Message.Status.PENDING,
        updated_at=Now(),  # a fresh pending answer, not an abandoned one
        content=so_far,
        error="",
        citations=[],
        retrieved=[],
        tool_calls=[],
        confidence="",
        follow_ups=[],
        usage={},
        timings={},
        metadata={"continue_from": so_far} if so_far else {},
    )
    if not updated:
        raise ValidationError(_("This answer is already being retried."), code="state")
    message.refresh_from_db()
    return message


def message_interrupt_abandoned(*, conversation_id: int | None = None) -> int:
    """Mark answers interrupted whose generation stopped (its web process died or restarted
    mid-answer): pending or streaming, and not touched for ABANDONED_AFTER_SECONDS by the
    database's clock. Safe with several web processes, each beating for its own answers; a
    conditional UPDATE, so it is idempotent and races with nothing. Returns how many."""
    cutoff = ExpressionWrapper(
        Now() - timedelta(seconds=ABANDONED_AFTER_SECONDS), output_field=DateTimeField()
    )
    answers = Message.objects.filter(
        role=Message.Role.ASSISTANT,
        status__in=(Message.Status.PENDING, Message.Status.STREAMING),
        updated_at__lt=cutoff,
    )
    if conversation_id is not None:
        answers = answers.filter(conversation_id=conversation_id)
    interrupted = answers.update(
        status=Message.Status.INTERRUPTED, error=INTERRUPTED_REASON, updated_at=Now()
    )
    if interrupted:
        logger.warning("marked %s abandoned answer(s) interrupted", interrupted)
    return interrupted
