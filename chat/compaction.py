"""Compaction: the older messages of a conversation become summaries, which the chat model reads
instead of them. The page still shows every message in full, with the summaries collapsible
above them.

What the model reads of a conversation (chat.agent): the summaries (`summaries_for`) and the
last HISTORY_MESSAGES complete messages that are not compacted (`history_for`), each in its
slot of the context budget beside the memories and the passages (chat.llm.budget).

When: after an answer, `schedule_compaction_if_needed` queues a background task (django-q2)
when more than MAX_UNCOMPACTED messages are not compacted, or when they come to more tokens
than half of what a prompt may use. The Compact button and
`POST /api/conversations/{id}/compact` compact at once (`conversation_compact_now`).

How: every message but the last KEEP_RECENT, up to the first answer still being written, in
batches of BATCH_SIZE that never part a question from its answer. The chat model summarises a
batch in one validated JSON call (core.llm); offline, or when the model's reply is
unusable, the summary is extractive: each question and the first sentence of its answer.

Concurrency: a Postgres advisory lock per conversation lets one compaction run at a time (a
second one returns at once, `busy`), so a batch is summarised once. Each batch is then written
under the conversation's row lock with a conditional UPDATE: all its messages must still be
uncompacted and finished, else nothing of it is written. So no message is ever summarised twice,
and no lock is held while the model writes: a compaction never keeps an answer waiting.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.db.models.functions import Length
from pydantic import BaseModel, field_validator

from chat import prompts
from chat.llm.server import token_counter
from chat.models import Conversation, ConversationSummary, Message
from core.jobs import job_submit
from core.llm import structured_call
from core.textutil import clip

logger = logging.getLogger(__name__)

KEEP_RECENT = 10  # the last messages: never compacted, and what the model reads in full
HISTORY_MESSAGES = KEEP_RECENT
BATCH_SIZE = 20  # messages per summary
MIN_BATCH = 2  # compacting at once (or for tokens) also summarises a shorter last batch
MAX_UNCOMPACTED = 30  # more than this many uncompacted messages: compact after the answer
BATCHES_NOW = 2  # with a model, batches summarised while the Compact request waits
BATCHES_PER_TASK = 10  # per background task; the rest goes to the next one
SUMMARY_TOKENS = 400  # a summary's length limit (the model's max_tokens)
SUMMARY_TIMEOUT = 60.0  # seconds for one summary call
SUMMARY_CHARS = 2000  # a model's summary is cut beyond this
QUESTION_CHARS = 200
SENTENCE_CHARS = 240
TRANSCRIPT_CHARS = 1500  # per message given to the model to summarise (halved to fit)
LOCK_NAMESPACE = 0x636F6D70  # "comp": the high half of the advisory lock's key
IN_PROGRESS = (Message.Status.PENDING, Message.Status.STREAMING)

_CITATION = re.compile(r"\s*\[\d{1,3}\]")
# A Markdown escape (chat.extractive writes them: its character is kept) or emphasis (dropped).
_MARKUP = re.compile(
    r"\\([\\`*_\[\]<>|~#+\-.!()])"  # an escape
    r"|\*\*|__|(?<!\w)[*_](?=\S)|(?<=\S)[*_](?!\w)|`"  # emphasis, code
)
_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_NUMBER = re.compile(r"\d+[.)]")  # "1." opening a line is no sentence
_LINE_MARK = re.compile(r"^\s*(?:#{1,6}\s+|>\s*|[-+*]\s+|\d+[.)]\s+)", re.MULTILINE)
_HEADING = re.compile(r"^\s*#{1,6}\s")
_LIST_ITEM = re.compile(r"^\s*(?:[-+*]|\d+[.)])\s")


# --- What the model reads


def history_for(message: Message) -> list[tuple[str, str]]:
    """The messages an answer's model reads in full: the last HISTORY_MESSAGES complete,
    uncompacted messages of its conversation before its question, oldest first."""
    before = message.reply_to_id or message.pk
    earlier = (
        Message.objects.filter(
            conversation_id=message.conversation_id,
            pk__lt=before,
            compacted=False,
            status=Message.Status.COMPLETE,
        )
        .order_by("-pk")
        .values_list("role", "content")[:HISTORY_MESSAGES]
    )
    return [(role, content) for role, content in reversed(earlier)]


def summaries_for(conversation: Conversation) -> list[str]:
    """The texts of the conversation's summaries, oldest first (they stand for its compacted
    messages)."""
    summaries = ConversationSummary.objects.filter(conversation_id=conversation.pk)
    return list(summaries.order_by("first_message_id").values_list("text", flat=True))


# --- When


def prompt_budget() -> int:
    """Tokens a prompt may use beside the answer (as chat.llm.answerer.LLMAnswerer counts)."""
    window = int(settings.CHAT_CONTEXT_TOKENS)
    return window - min(int(settings.CHAT_MAX_ANSWER_TOKENS), window // 2)


def uncompacted_tokens(conversation_id: int) -> int:
    """The conversation's complete, uncompacted messages in tokens: counted for the chat model
    when there is one, else estimated at four characters a token."""
    messages = Message.objects.filter(
        conversation_id=conversation_id, compacted=False, status=Message.Status.COMPLETE
    )
    if settings.CHAT_MODEL:
        count = token_counter(settings.CHAT_MODEL)
        return sum(count(text) for text in messages.values_list("content", flat=True))
    chars = messages.aggregate(chars=Sum(Length("content")))["chars"] or 0
    return int(chars) // 4


def compaction_due(conversation_id: int) -> str | None:
    """Why the conversation should be compacted now: "messages" (more than MAX_UNCOMPACTED
    are not compacted), "tokens" (they take more than half of a prompt's budget), or None."""
    count = Message.objects.filter(conversation_id=conversation_id, compacted=False).count()
    if count < KEEP_RECENT + MIN_BATCH:
        return None  # nothing could be compacted
    if count > MAX_UNCOMPACTED:
        return "messages"
    if uncompacted_tokens(conversation_id) > prompt_budget() // 2:
        return "tokens"
    return None


def schedule_compaction_if_needed(conversation_id: int) -> bool:
    """After an answer: queue a background compaction if one is due (on commit). Never
    raises, so that compaction can neither fail nor delay the answer."""
    try:
        reason = compaction_due(conversation_id)
        if reason is None:
            return False
        # Past the message limit, whole batches are enough; past the token limit, compact
        # everything older than the last messages.
        _enqueue(conversation_id, force=reason == "tokens")
    except Exception:
        logger.exception("could not schedule the compaction of conversation %s", conversation_id)
        return False
    return True


def _enqueue(conversation_id: int, *, force: bool) -> None:
    """Queue a compaction as the conversation owner's job (core.jobs: fair per user), sent
    when the current transaction commits."""
    owner_id = (
        Conversation.objects.filter(pk=conversation_id).values_list("owner_id", flat=True).first()
    )
    job_submit(
        "chat.compaction.compaction_task",
        conversation_id,
        force,
        user_id=owner_id,
        group="compact-conversation",
    )


def compaction_task(conversation_id: int | str, force: bool = False) -> int:
    """django-q2: compact a conversation (BATCHES_PER_TASK batches, then queue the rest); a
    conversation deleted meanwhile is skipped. Idempotent. Returns the messages compacted."""
    conversation = Conversation.objects.filter(pk=int(conversation_id)).first()
    if conversation is None:
        logger.info("conversation %s is gone; nothing to compact", conversation_id)
        return 0
    try:
        done = conversation_compact(
            conversation=conversation, force=force, max_batches=BATCHES_PER_TASK
        )
    except Exception:
        logger.exception("compaction of conversation %s failed", conversation.pk)
        raise
    if done.remaining:
        _enqueue(conversation.pk, force=force)
    return done.compacted


# --- How


@dataclass
class Compaction:
    """What one compaction run did."""

    compacted: int = 0  # messages summarised
    summaries: int = 0  # summaries written
    remaining: int = 0  # messages it could have compacted but left (max_batches)
    busy: bool = False  # another compaction of the conversation was running: nothing done
    uncompacted: int = 0  # the conversation's messages not compacted, after the run


def conversation_compact_now(*, conversation: Conversation) -> Compaction:
    """Compact at once (the Compact button, the API): offline everything, with a model at
    most BATCHES_NOW summary calls while the caller waits, and the rest in the background."""
    limit = BATCHES_NOW if settings.CHAT_MODEL else None
    done = conversation_compact(conversation=conversation, force=True, max_batches=limit)
    if done.remaining:
        _enqueue(conversation.pk, force=True)
    return done


def conversation_compact(
    *, conversation: Conversation, force: bool = True, max_batches: int | None = None
) -> Compaction:
    """Summarise the conversation's older messages into ConversationSummary rows and mark
    them compacted: all but the last KEEP_RECENT, never an answer in progress or anything
    after it. Without `force`, only whole batches. One run at a time per conversation; a batch
    is written only if none of its messages was compacted meanwhile (see the module)."""
    done = Compaction()
    with _exclusive(conversation.pk) as held:
        if not held:
            done.busy = True
        else:
            batches = _batches(conversation.pk, force=force)
            if max_batches is not None and len(batches) > max_batches:
                done.remaining = sum(len(batch) for batch in batches[max_batches:])
                batches = batches[:max_batches]
            for batch in batches:
                text, summarizer = summarise(batch)
                if not _write(conversation.pk, batch, text, summarizer):
                    logger.info("conversation %s changed while compacting", conversation.pk)
                    break
                done.compacted += len(batch)
                done.summaries += 1
    done.uncompacted = Message.objects.filter(
        conversation_id=conversation.pk, compacted=False
    ).count()
    return done


def _batches(conversation_id: int, *, force: bool) -> list[list[Message]]:
    messages = list(
        Message.objects.filter(conversation_id=conversation_id, compacted=False)
        .order_by("created_at", "pk")
        .only("pk", "role", "content", "status", "reply_to_id", "conversation_id")
    )
    older = messages[: max(0, len(messages) - KEEP_RECENT)]
    for i, message in enumerate(older):
        if message.status in IN_PROGRESS:
            older = older[:i]  # nothing from an answer being written on
            break
    while older and older[-1].role == Message.Role.USER:
        older.pop()  # its answer is kept, so the question stays with it
    batches: list[list[Message]] = []
    start = 0
    while len(older) - start >= (MIN_BATCH if force else BATCH_SIZE):
        batch = older[start : start + BATCH_SIZE]
        if len(batch) == BATCH_SIZE and batch[-1].role == Message.Role.USER:
            batch.pop()  # the question goes with its answer, into the next batch
        batches.append(batch)
        start += len(batch)
    return batches


class _Taken(Exception):
    """Some message of the batch was compacted or taken up again meanwhile."""


def _write(conversation_id: int, batch: list[Message], text: str, summarizer: str) -> bool:
    ids = [message.pk for message in batch]
    try:
        with transaction.atomic():
            # The conversation's row lock orders concurrent writers; the conditional UPDATE
            # then sees what the previous one committed.
            locked = Conversation.objects.select_for_update().filter(pk=conversation_id)
            if not list(locked.values_list("pk", flat=True)):
                raise _Taken
            marked = (
                Message.objects.filter(pk__in=ids, conversation_id=conversation_id)
                .filter(compacted=False)
                .exclude(status__in=IN_PROGRESS)
                .update(compacted=True)
            )
            if marked != len(ids):
                raise _Taken
            ConversationSummary.objects.create(
                conversation_id=conversation_id,
                text=text,
                first_message_id=ids[0],
                last_message_id=ids[-1],
                message_count=len(ids),
                summarizer=summarizer,
            )
    except _Taken:
        return False
    return True


@contextmanager
def _exclusive(conversation_id: int) -> Iterator[bool]:
    """Whether this run holds the conversation's compaction lock: a session-level advisory
    lock, released at the end however the run ends (and with the connection if the process
    dies)."""
    key = (LOCK_NAMESPACE << 32) | (conversation_id & 0xFFFFFFFF)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s::bigint)", [key])
        row = cursor.fetchone()
    held = bool(row and row[0])
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s::bigint)", [key])


# --- Summaries


class _Summary(BaseModel):
    summary: str

    @field_validator("summary")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the summary is empty")
        return value.strip()


def summarise(batch: list[Message]) -> tuple[str, str]:
    """A batch's summary and its summarizer: "llm" when the chat model gave a usable one,
    else "extractive" (no model, or junk, invalid JSON, a refusal, an error or a timeout)."""
    if settings.CHAT_MODEL:
        try:
            reply = structured_call(
                name="conversation_summary",
                system=prompts.SUMMARY_SYSTEM,
                user=_transcript(batch),
                model=_Summary,
                max_tokens=SUMMARY_TOKENS,
                timeout=SUMMARY_TIMEOUT,
            )
        except Exception:  # whatever happens, the extractive summary is always there
            logger.exception("summary call failed")
            reply = None
        if reply is not None:
            return clip(" ".join(reply.summary.split()), SUMMARY_CHARS), "llm"
        logger.info("the model gave no usable summary; summarising extractively")
    return extractive_summary(batch), "extractive"


def extractive_summary(batch: list[Message]) -> str:
    """Each question of the batch ("Q: …") and the first sentence of its answer ("A: …"),
    without [n] markers or Markdown."""
    lines: list[str] = []
    for message in batch:
        if message.role == Message.Role.USER:
            if lines:
                lines.append("")
            lines.append(f"Q: {clip(plain(message.content), QUESTION_CHARS)}")
        elif message.status == Message.Status.COMPLETE and first_sentence(message.content):
            lines.append(f"A: {first_sentence(message.content)}")
        else:
            lines.append("A: (not answered)")
    return "\n".join(lines)


def plain(text: str) -> str:
    """An answer's Markdown as one line of plain text, without [n] markers."""
    text = _CITATION.sub("", text)
    text = _LINE_MARK.sub("", text)
    text = _MARKUP.sub(lambda match: match.group(1) or "", text)
    return " ".join(text.split())


def first_sentence(text: str) -> str:
    """The first sentence of the first paragraph (or list item) with words in it, past any
    heading, as plain text."""
    blocks: list[str] = []
    for paragraph in _PARAGRAPH.split(_CITATION.sub("", text)):
        lines = paragraph.strip().splitlines()
        blocks += lines if any(_LIST_ITEM.match(line) for line in lines) else [paragraph]
    for block in blocks:
        if _HEADING.match(block):
            continue
        flat = plain(block)
        if any(ch.isalnum() for ch in flat):
            pieces = _SENTENCE_END.split(flat)
            sentence = pieces.pop(0)
            while pieces and _NUMBER.fullmatch(sentence):
                sentence += " " + pieces.pop(0)
            return clip(sentence, SENTENCE_CHARS)
    return ""


def _transcript(batch: list[Message]) -> str:
    """The batch as the summary call's user message, fenced, each message cut as needed to
    fit the model's window beside the summary."""

    count = token_counter(settings.CHAT_MODEL)
    room = int(settings.CHAT_CONTEXT_TOKENS) - SUMMARY_TOKENS - count(prompts.SUMMARY_SYSTEM)
    chars = TRANSCRIPT_CHARS
    while True:
        lines = []
        for message in batch:
            text = clip(plain(message.content), chars)
            if message.role == Message.Role.USER:
                lines.append(f"User: {text}")
            elif message.status == Message.Status.COMPLETE and text:
                lines.append(f"Assistant: {text}")
        user = prompts.SUMMARY_USER.format(transcript=prompts.fenced("\n".join(lines)))
        if chars <= 100 or count(user) + 64 <= room:
            return user
        chars //= 2
