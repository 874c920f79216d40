"""Generating one answer: pick the answerer (chat model or extractive), run it with the tools
of this chat, stream its events out, verify its citations and save everything on the message.

`generate(message_id, emit)` is the one path for the page (WebSocket), the API (SSE) and the
evaluation command. It claims the message (pending → streaming) so an answer is generated
once, whoever asks; it saves the growing text as it streams, so a reload shows it.

While it runs, a heartbeat thread of this process touches the message every
HEARTBEAT_SECONDS. An answer whose process died (a crash, a kill, a restart) stops being
touched and is then marked interrupted, with Retry (chat.services.message_interrupt_abandoned).
Every write of a generation is conditional on the claim it made (the message's `attempt` and
`streaming`), so a generation that was given up for dead, or whose answer was retried or
deleted meanwhile, stops instead of overwriting anything.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.db import connections
from django.db.models import F, Q
from django.db.models.functions import Now

from chat import claims
from chat.compaction import history_for, schedule_compaction_if_needed, summaries_for
from chat.events import AnswerError, Event, Finished, Token, ToolActivity
from chat.extractive import ExtractiveAnswerer
from chat.llm import LLMAnswerer
from chat.llm.server import model_available, unavailable_notice
from chat.memory import memories_for_prompt, schedule_memory_extraction
from chat.models import Message
from chat.reformulation import Reformulation, reformulate, resumed
from chat.selection import SourceSet, prepare, stored_selections
from chat.tools import AnswerRequest
from core import metrics
from grounding.citations import allowed_links, cited_numbers, renumber, verify

if TYPE_CHECKING:
    from core.types import User
    from notes.models import Notebook

logger = logging.getLogger(__name__)
Emit = Callable[[str, dict[str, Any]], None]
SAVE_EVERY = 0.5  # seconds between saves of a streaming answer
# Seconds between the heartbeats of the answers this process writes; well under
# chat.services.ABANDONED_AFTER_SECONDS.
HEARTBEAT_SECONDS = 10.0


class Answerer(Protocol):
    name: str  # "llm" | "extractive"
    notice: str  # why this answerer answers, when it stands in for another (shown)

    def run(
        self, question: str, history: list[tuple[str, str]], context: AnswerRequest
    ) -> Iterator[Event]: ...


def get_answerer() -> Answerer:
    """The chat model when CHAT_MODEL is set, else the offline extractive answerer. While the
    model's circuit breaker is open (it failed LLM_BREAKER_FAILURES times in a row) the
    extractive answerer stands in, its `notice` saying why."""

    if settings.CHAT_MODEL:
        if model_available():
            return LLMAnswerer()
        offline = ExtractiveAnswerer()
        offline.notice = unavailable_notice()
        metrics.fallback("answer_offline")
        return offline
    return ExtractiveAnswerer()


def claim(message_id: int) -> int | None:
    """pending → streaming, once: the claim's attempt number; a second caller (reconnect,
    retry click) gets None."""
    claimed = Message.objects.filter(
        pk=message_id, role=Message.Role.ASSISTANT, status=Message.Status.PENDING
    ).update(status=Message.Status.STREAMING, attempt=F("attempt") + 1, updated_at=Now())
    if not claimed:
        return None
    return Message.objects.filter(pk=message_id).values_list("attempt", flat=True).first()


class Superseded(Exception):
    """This generation no longer owns its answer (interrupted, retried or deleted)."""


class _Heartbeat:
    """Touches `updated_at` of the answers this process is writing, from one thread that runs
    while there are any: proof of life that does not depend on the model sending tokens."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writing: dict[int, int] = {}  # message id → attempt
        self.thread: threading.Thread | None = None
        self.pid = 0

    def add(self, message_id: int, attempt: int) -> None:
        with self.lock:
            self.writing[message_id] = attempt
            # A forked child inherits the parent's thread object but not the thread.
            if self.thread is None or self.pid != os.getpid() or not self.thread.is_alive():
                self.pid = os.getpid()
                self.thread = threading.Thread(target=self._run, name="answer-heartbeat")
                self.thread.daemon = True
                self.thread.start()

    def discard(self, message_id: int, attempt: int) -> None:
        with self.lock:
            if self.writing.get(message_id) == attempt:  # not a retry's that took it over
                del self.writing[message_id]

    def _run(self) -> None:
        while True:
            time.sleep(HEARTBEAT_SECONDS)
            with self.lock:
                if not self.writing:
                    self.thread = None
                    return
                beating = dict(self.writing)
            self._beat(beating)

    @staticmethod
    def _beat(beating: dict[int, int]) -> None:
        ours = Q()
        for pk, attempt in beating.items():
            ours |= Q(pk=pk, attempt=attempt)
        try:
            Message.objects.filter(ours, status=Message.Status.STREAMING).update(updated_at=Now())
        except Exception:  # the database is away: the next beat tries again
            logger.warning("heartbeat of answers %s failed", sorted(beating))
        finally:
            connections.close_all()  # no connection held between beats


_heartbeat = _Heartbeat()


def generate(message_id: int, emit: Emit, answerer: Answerer | None = None) -> Message | None:
    """Generate the answer of a pending assistant message; None if it was not pending."""
    attempt = claim(message_id)
    if attempt is None:
        return None
    _heartbeat.add(message_id, attempt)
    try:
        return _generate(message_id, attempt, emit, answerer)
    except Superseded:
        logger.warning("answer %s (attempt %s) was taken over; stopped", message_id, attempt)
        emit("error", {"message_id": message_id, "message": "This answer was interrupted."})
        return Message.objects.filter(pk=message_id).first()
    finally:
        _heartbeat.discard(message_id, attempt)


def _generate(message_id: int, attempt: int, emit: Emit, answerer: Answerer | None) -> Message:
    message = Message.objects.select_related(
        "conversation__owner", "conversation__notebook", "conversation__note", "reply_to"
    ).get(pk=message_id)
    conversation = message.conversation
    answerer = answerer or get_answerer()
    asked = message.reply_to
    base = AnswerRequest(
        user=conversation.owner,
        notebook=conversation.notebook,
        note=conversation.note,
        conversation=conversation,
        continuing=str((message.metadata or {}).get("continue_from", "")),
        mode=(asked.mode if asked else "") or conversation.mode,
        summaries=tuple(summaries_for(conversation)),
        attachment_id=conversation.attachment_id,
    )
    started = time.perf_counter()  # times count from here: memories and reformulation too
    # Memories fill the chat model's prompt; the offline answerer quotes sources only.
    memories: tuple[str, ...] = ()
    if asked is not None and not base.continuing and answerer.name == "llm":
        memories = tuple(
            memories_for_prompt(
                user=conversation.owner, notebook=conversation.notebook, question=asked.content
            )
        )
    question = asked.content if asked else ""
    context = replace(base, memories=memories)
    if asked is not None:
        context = _reformulate(asked, context, emit, message.pk)
    timings: dict[str, float] = {
        "retrieval": 0.0,
        "reformulation": round(time.perf_counter() - started, 3),
    }
    parts: list[str] = [context.continuing] if context.continuing else []
    if context.continuing:  # the page shows the answer so far again, then what follows
        emit("token", {"message_id": message.pk, "text": context.continuing})
    tool_calls: list[dict[str, Any]] = []
    last_save = started
    finished = Finished()
    message.answerer = answerer.name

    def save(**fields: Any) -> None:
        _write(message_id, attempt, content="".join(parts), tool_calls=tool_calls,
               answerer=answerer.name, **fields)  # fmt: skip

    try:
        for event in answerer.run(question, history_for(message), context):
            if isinstance(event, Token):
                if "first_token" not in timings:
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
    except Superseded:
        raise
    except AnswerError as exc:
        save(status=Message.Status.ERROR, error=str(exc))
        return _failed(message, str(exc), emit)
    except Exception:
        logger.exception("answer %s failed", message.pk)
        error = "Something went wrong while answering."
        save(status=Message.Status.ERROR, error=error)
        return _failed(message, error, emit)

    result = check("".join(parts), finished, context.sources, answerer.name)
    content, citations, refused = result.content, result.citations, result.refused
    grounding, checked, unbacked = result.grounding, result.claims, result.unbacked
    timings["retrieval"] = round(timings["retrieval"], 3)
    timings["total"] = round(time.perf_counter() - started, 3)
    timings.setdefault("first_token", timings["total"])
    for citation in citations:
        emit("citation", {"message_id": message.pk, **citation})
    metadata = {
        "unverified_citations": refused,
        "abstained": grounding == "abstained",
        "grounding": grounding,
        "links": allowed_links(content, question=question, citations=citations),
    }
    if checked is not None:
        metadata["claims"] = checked
    if finished.cut_short:
        metadata["cut_short"] = True
    if context.selection is not None:  # how the chosen sources were merged (chat.selection)
        metadata["source_summary"] = context.selection.summary()
    if finished.related:
        metadata["related"] = finished.related
    if finished.context:  # the chat model's context slots, in tokens
        metadata["context"] = finished.context
    # Why this answerer stands in (test doubles may not have one), how retrieval fell short.
    notices = [getattr(answerer, "notice", ""), *context.notices]
    if notice := " ".join(n for n in notices if n):
        metadata["notice"] = notice
    # A confidence badge on an answer nothing verifiable supports would mislead, and "high"
    # on one with a sentence the sources do not back.
    confidence = finished.confidence if grounding != "unsourced" else ""
    if confidence == "high" and unbacked:
        confidence = "medium"
    parts[:] = [content]  # what is saved: the cleaned text, if cleaning changed it
    save(
        status=Message.Status.COMPLETE,
        citations=citations,
        retrieved=[_retrieved(source) for source in context.sources],
        confidence=confidence,
        follow_ups=finished.follow_ups[:3],
        usage=finished.usage,
        timings=timings,
        metadata=metadata,
    )
    conversation.save(update_fields=["updated_at"])
    schedule_compaction_if_needed(conversation.pk)  # in the background; never raises
    schedule_memory_extraction(message)  # likewise
    emit(
        "done",
        {
            "message_id": message.pk,
            "usage": finished.usage,
            "confidence": confidence,
            "follow_ups": finished.follow_ups[:3],
            "citations": citations,
            "unverified_citations": refused,
            "grounding": grounding,
            "claims": checked,
            "cut_short": finished.cut_short,
            "timings": timings,
            "content": content,  # as saved: cleaned, citations renumbered
        },
    )
    message.refresh_from_db()
    return message


def _reformulate(asked: Message, base: AnswerRequest, emit: Emit, answer_id: int) -> AnswerRequest:
    """The request as retrieval will search it: the chat model's rewrite of a follow-up, or
    offline the question as asked with the conversation as the context of its vector query and
    the anchor documents (chat.reformulation), saved on the question and announced. A
    continued answer keeps what its question searched. Never fails the answer: on any error
    the question is searched as is, without context."""

    conversation = asked.conversation
    if base.continuing and asked.search_query:
        found = resumed(asked)
        selection = prepare(conversation=conversation, asked=asked, follow_up=found.is_follow_up)
    else:
        # The evidence for a new topic is weighed among the sources a follow-up may use (the
        # chosen ones and what the previous answer cited, chat.selection).
        selection = prepare(conversation=conversation, asked=asked, follow_up=True)
        try:
            found = reformulate(asked, scope=replace(base, selection=selection).scope())
        except Exception:
            logger.exception("reformulation of question %s failed; searching it as asked", asked.pk)
            found = Reformulation(asked.content)
        if not found.is_follow_up:  # no carry-over for a new topic
            selection = prepare(conversation=conversation, asked=asked, follow_up=False)
        Message.objects.filter(pk=asked.pk).update(
            search_query=found.query, is_follow_up=found.is_follow_up, anchors=found.anchors
        )
    follow_up = found.is_follow_up
    anchors = list(found.anchors) if follow_up else []
    pages = list(found.pages) if follow_up else []
    notices = list(base.notices)
    if selection is not None:
        # Anchoring only boosts what may be searched; excluded documents lose their boost.
        excluded = {int(r.split(":")[1]) for r in selection.excluded
                    if r.startswith("attachment:")}  # fmt: skip
        anchors = [a for a in anchors if a not in excluded]
        pages = [p for p in pages if p[0] not in excluded]
        for chip in stored_selections(asked):
            if chip.get("warning") and chip["warning"] not in notices:
                notices.append(str(chip["warning"]))
    vector = found.context_vector if follow_up else None
    context = replace(
        base,
        selection=selection,
        search_query=found.query,
        search_focus=found.query,  # kept for the offline answerer: nothing else to weigh
        context_vector=tuple(vector) if vector is not None else None,
        context_text=found.context_text if follow_up else "",
        anchors=tuple(anchors),
        anchor_pages=tuple(pages),
        said=frozenset(_said_before(asked)) if follow_up else frozenset(),
        sources=[],
        notices=notices,
    )
    emit(
        "searched",
        {"message_id": answer_id, "question_id": asked.pk, "query": found.query,
         "is_follow_up": follow_up, "rewritten": found.query != asked.content,
         "anchors": list(context.anchors)},
    )  # fmt: skip
    return context


def _said_before(asked: Message) -> set[str]:
    """The sentences the answer before `asked` quoted, whitespace collapsed."""
    previous = (
        Message.objects.filter(
            conversation_id=asked.conversation_id, role=Message.Role.ASSISTANT, pk__lt=asked.pk
        )
        .order_by("-pk")
        .values_list("citations", flat=True)
        .first()
    )
    return {" ".join(str(c.get("quote", "")).split()) for c in previous or []} - {""}


@dataclass(frozen=True)
class Checked:
    """An answer as it may be shown: its text cleaned and, for a chat model's, without the
    sentences no source backs; its verified citations, renumbered."""

    content: str
    citations: list[dict[str, Any]]
    refused: int  # quotes not on their page, sources cited by unbacked sentences only
    grounding: str  # cited | abstained | unsourced
    claims: dict[str, Any] | None  # chat.claims.summary of a chat model's sentences
    unbacked: list[dict[str, Any]]


def check(
    streamed: str, finished: Finished, sources: list[dict[str, Any]], answerer: str
) -> Checked:
    """What an answerer wrote (`streamed`, or the text its Finished event replaces it with),
    checked against the passages it was given: every answer, streamed or not, goes
    through this."""
    content = claims.clean(finished.text if finished.text is not None else streamed)
    # The chat model's sentences are judged one by one (chat.claims); the offline answer's
    # are verbatim quotes of the passages they cite.
    judged, lost = None, 0
    if answerer == "llm" and not finished.abstained:
        judged = claims.judge(content, sources)
        stripped = claims.strip_unbacked(content, judged)
        # A source cited only by unbacked sentences is a citation refused, as one whose quote
        # is not on the page.
        lost = len(set(cited_numbers(content)) - set(cited_numbers(stripped)))
        content = stripped
    citations, refused = verify(content, sources, finished.quotes)
    refused += lost
    content, citations = renumber(content, citations)
    content, unbacked = claims.locate(content)
    grounding = _grounding(citations, finished)
    checked = claims.summary(judged, unbacked) if judged is not None else None
    if checked is not None and checked["sentences"] and not checked["backed"]:
        grounding = "unsourced"  # nothing it says was found in the sources
    return Checked(content, citations, refused, grounding, checked, list(unbacked))


def answer_once(
    *,
    user: User,
    notebook: Notebook,
    question: str,
    selection: SourceSet | None = None,
    answerer: Answerer | None = None,
) -> tuple[Checked, Finished]:
    """One question answered outside a conversation (no history, no memories), as the chat
    would answer it and checked the same way (`check`): what Studio's FAQ and review
    questions are made of. Raises AnswerError when the answerer cannot answer."""
    answerer = answerer or get_answerer()
    context = AnswerRequest(user=user, notebook=notebook, mode="learning", selection=selection)
    parts: list[str] = []
    finished = Finished()
    for event in answerer.run(question, [], context):
        if isinstance(event, Token):
            parts.append(event.text)
        elif isinstance(event, Finished):
            finished = event
    return check("".join(parts), finished, context.sources, answerer.name), finished


def _grounding(citations: list[dict[str, Any]], finished: Finished) -> str:
    """cited: at least one citation was verified; abstained: the answer says the sources do
    not answer; unsourced: neither, so the page warns instead of showing a normal answer."""
    if citations:
        return "cited"
    return "abstained" if finished.abstained else "unsourced"


def _write(message_id: int, attempt: int, **fields: Any) -> None:
    """Save this generation's state, only while it still owns the answer."""
    owned = Message.objects.filter(
        pk=message_id, attempt=attempt, status=Message.Status.STREAMING
    ).update(updated_at=Now(), **fields)
    if not owned:
        raise Superseded


def _retrieved(source: dict[str, Any]) -> dict[str, Any]:
    keys = ("n", "kind", "id", "score", "lexical", "vector", "attachment_id", "file", "page",
            "note_id")  # fmt: skip
    return {key: source[key] for key in keys if key in source}


def _failed(message: Message, error: str, emit: Emit) -> Message:
    emit("error", {"message_id": message.pk, "message": error})
    message.refresh_from_db()
    return message
