"""The chat-model answerer: any OpenAI-compatible server (OPENAI_BASE_URL, CHAT_MODEL).

1. Retrieval first: `document_search` (and `note_search` in a notebook chat) run with the
   question before the model writes (chat.tools.search_first). A question the passages do
   not support by the evidence rule is refused there, without the model: no answer is ever
   produced from nothing, and a refusal never depends on the model's wording.
2. The model answers from those passages, given numbered and fenced with the question. Tool
   calling stays available for further searches where the server supports it (CHAT_TOOLS and
   what chat.llm.server remembers of the server); a bounded loop of at most
   CHAT_MAX_TOOL_CALLS rounds, then one request that may not call tools. Streamed text goes
   through chat.model_output.TemplateFilter (no chat-template tokens reach the page).
3. Phase 2 (chat.llm.metadata): confidence, follow-ups, answerable, and the quote behind
   each [n]; a cited [n] left without a quote gets the sentence of its source that shares most
   words with the claim (grounding.evidence.backing_sentence). The agent verifies every quote.

Every request is fitted to CHAT_CONTEXT_TOKENS slot by slot (chat.llm.budget): the memories
and summaries of older turns in the context go with the question, as data; what each slot took
in the answer's last request is reported in Finished.context. Model output is untrusted text:
nothing here renders it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import openai
from django.conf import settings

from chat import prompts
from chat.events import AnswerError, Event, Finished, Token, ToolActivity
from chat.extractive import abstention, words
from chat.llm.budget import ChatMessage, ContextBudget, Framed
from chat.llm.messages import history_messages, system_prompt
from chat.llm.metadata import request_metadata
from chat.llm.server import cut_off, stream_chat, token_counter
from chat.model_output import TemplateFilter, remove_echoes
from chat.tools import AnswerRequest, Tool, ToolResult, openai_tools, search_first, tools_for
from core.llm import client, describe_error, traits
from grounding.citations import cited_numbers
from grounding.evidence import back_claims, weigh

if TYPE_CHECKING:
    from openai.types.chat import (
        ChatCompletionMessageParam,
        ChatCompletionStreamOptionsParam,
        ChatCompletionToolChoiceOptionParam,
        ChatCompletionToolUnionParam,
    )

logger = logging.getLogger(__name__)

Form = Literal["native", "user"]  # how tool results go back to the model
CALLS_PER_ROUND = 5  # tool calls run from one turn; more are answered "skipped"
METADATA_TOKENS = 600  # phase 2's answer: a few quotes and questions
METADATA_SOURCE_CHARS = 1500


class _ToolsBroke(Exception):
    """The server failed a request because tools were offered (before any text came): an HTTP
    error, an error reported in the stream, or a clean end without `finish_reason`. Never a
    broken connection, which is a failure of that answer only."""


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: str = ""

    @property
    def key(self) -> tuple[str, str]:
        try:
            arguments = json.dumps(json.loads(self.arguments or "{}"), sort_keys=True)
        except ValueError:
            arguments = self.arguments
        return self.name, arguments


@dataclass
class _Turn:
    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: tuple[int, int] | None = None  # prompt, completion tokens as the server counted


@dataclass
class _Round:
    """One tool round: what the model said, the calls it made, what each returned."""

    text: str
    calls: list[_Call]
    results: list[str]
    summaries: list[str]


class LLMAnswerer(ContextBudget):
    name = "llm"
    notice = ""

    def __init__(self) -> None:
        self.model: str = settings.CHAT_MODEL
        # The SDK retries connection errors, 408, 409, 429 and 5xx itself (Retry-After).
        self.client = client(
            settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY, float(settings.CHAT_TIMEOUT), 2
        )
        self.count = token_counter(self.model)
        window = int(settings.CHAT_CONTEXT_TOKENS)
        # An answer may not take more than half the window: the sources need the rest.
        self.max_tokens = min(int(settings.CHAT_MAX_ANSWER_TOKENS), window // 2)
        self.budget = window - self.max_tokens  # what a prompt may use
        self.max_rounds = int(settings.CHAT_MAX_TOOL_CALLS)
        self.usage: dict[str, int] = {}
        self.estimated = False  # some request's usage was counted here, not by the server
        self.history_left = 0  # history messages still in the prompt (see _fit)
        self.framed: dict[int, Framed] = {}  # id(message) → its parts (see _fit)
        self.dropped: dict[str, int] = {}
        self.context_slots: dict[str, int] = {}  # tokens per slot of the last request
        self.stream_options: ChatCompletionStreamOptionsParam | None = {"include_usage": True}

    # --- The answer

    def run(
        self, question: str, history: list[tuple[str, str]], context: AnswerRequest
    ) -> Iterator[Event]:
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}
        self.context_slots = {}
        results = yield from search_first(question, context)
        passages = [p for result in results for p in result.passages]
        evidence = weigh(question, passages, context)
        if not evidence.supported:
            yield from words(abstention(evidence, [r.summary for r in results]))
            yield Finished(confidence="low", abstained=True, usage=self._usage())
            return

        tools = tools_for(context)
        by_name = {tool.name: tool for tool in tools}
        mode = self._tool_mode()
        past = history_messages(history)
        sources = "\n".join(r.content for r in results if r.passages) or prompts.NO_SOURCES
        asked = Framed(
            prompts.QUESTION_SOURCES,
            sources,
            prompts.QUESTION_AFTER.format(question=question),
            memories=list(context.memories),
            summaries=list(context.summaries),
        )
        rounds: list[_Round] = []
        parts: list[str] = [context.continuing] if context.continuing else []
        if context.continuing:  # write on from the cut, from the same passages, without tools
            mode = "off"
        seen: set[tuple[str, str]] = set()
        cut_short = False
        system = ""
        round_ = 0
        while True:
            offered = mode != "off"
            final = round_ >= self.max_rounds or not offered
            system = system_prompt(context, by_name, tools_offered=offered)
            form: Form = "native" if mode in ("auto", "native") else "user"
            messages = self._messages(system, past, asked, rounds, form)
            if context.continuing:
                messages += [
                    {"role": "assistant", "content": context.continuing},
                    {"role": "user", "content": prompts.CONTINUE},
                ]
            schema = openai_tools(tools, context) if offered or _has_calls(rounds, form) else []
            self._fit(messages, schema)
            self.context_slots = self.slots(messages, schema)
            try:
                turn = yield from self._stream(
                    messages, schema, final=final, after="".join(parts), auto=offered
                )
            except _ToolsBroke:
                logger.warning("%s fails streamed tool calls; answering without tools", self.model)
                traits().streamed_tools = False
                mode = "off"
                continue
            parts.extend(turn.text)
            cut_short = turn.finish_reason == "length"
            if not turn.calls or final:
                break
            calls = [turn.calls[i] for i in sorted(turn.calls)]
            for i, call in enumerate(calls):
                call.id = call.id or f"call_{round_}_{i}"
            if mode == "auto" and form == "native" and all(c.key in seen for c in calls):
                # Only searches it already made: the server's chat template dropped results.
                logger.warning("%s repeats tool calls; passing results as user text", self.model)
                traits().tool_messages = False
                mode = "user"
            round_ += 1
            done = yield from self._run_tools(calls, by_name, context)
            rounds.append(_Round("".join(turn.text), calls, *done))
            seen.update(c.key for c in calls)

        answer = remove_echoes("".join(parts), prompt=system, question=question)
        if not answer.strip():
            raise AnswerError("The language model gave no answer. Try again or rephrase.")
        finished = self._finish(question, answer, context)
        finished.cut_short = cut_short
        finished.context = self.context_slots
        if answer != "".join(parts):
            finished.text = answer
        yield finished

    def _tool_mode(self) -> str:
        """auto | native | user | off, from CHAT_TOOLS and what this server showed."""
        mode = str(settings.CHAT_TOOLS)
        if mode != "auto":
            return mode
        server = traits()
        if not server.streamed_tools:
            return "off"
        return "auto" if server.tool_messages else "user"

    def _messages(
        self,
        system: str,
        past: list[ChatMessage],
        asked: Framed,
        rounds: list[_Round],
        form: Form,
    ) -> list[ChatMessage]:
        """The request for the next turn, built afresh (so each round is fitted from the full
        sources): system, history, sources and question, then the tool rounds in `form`."""
        self.framed = {}
        question = self._framed_message("user", asked)
        messages: list[ChatMessage] = [{"role": "system", "content": system}, *past, question]
        self.history_left = len(past)
        for done in rounds:
            if form == "native":
                messages.append(_assistant_message(done.text, done.calls))
                for call, result in zip(done.calls, done.results, strict=True):
                    tool: ChatMessage = {"role": "tool", "tool_call_id": call.id}
                    messages.append(tool)
                    self.framed[id(tool)] = Framed("", result)
                    tool["content"] = result
            else:
                said = done.text.strip() or "Let me search the sources again."
                messages.append({"role": "assistant", "content": said})
                searches = "; ".join(done.summaries)
                framed = Framed(
                    prompts.TOOL_RESULTS_USER.format(searches=searches),
                    "\n".join(done.results),
                    prompts.TOOL_RESULTS_AFTER,
                )
                messages.append(self._framed_message("user", framed))
        return messages

    def _framed_message(self, role: str, framed: Framed) -> ChatMessage:
        # A copy: fitting cuts and drops parts of this request only.
        copy = Framed(framed.head, framed.body, framed.tail,
                      list(framed.memories), list(framed.summaries))  # fmt: skip
        message: ChatMessage = {"role": role, "content": copy.content}
        self.framed[id(message)] = copy
        return message

    def _stream(
        self,
        messages: list[ChatMessage],
        schema: list[dict[str, Any]],
        *,
        final: bool,
        after: str,
        auto: bool,
    ) -> Generator[Event, None, _Turn]:
        """One streamed request; yields the answer's tokens and returns the whole turn."""
        turn = _Turn()
        go_on = bool(messages) and messages[-1].get("content") == prompts.CONTINUE
        prompt_tokens = self.size(messages, schema)
        tools: list[ChatCompletionToolUnionParam] | openai.Omit = openai.omit
        tool_choice: ChatCompletionToolChoiceOptionParam | openai.Omit = openai.omit
        if schema:
            tools = cast("list[ChatCompletionToolUnionParam]", schema)
            # Explicit: some servers drop the tools altogether when tool_choice is missing.
            tool_choice = "none" if final or not auto else "auto"
        offering = bool(schema) and tool_choice == "auto"
        while True:
            try:
                stream = stream_chat(  # through the chat model's circuit breaker
                    self.client,
                    model=self.model,
                    messages=cast("list[ChatCompletionMessageParam]", messages),
                    tools=tools,
                    tool_choice=tool_choice,
                    max_tokens=self.max_tokens,
                    stream=True,
                    stream_options=self.stream_options or openai.omit,
                )
                break
            except openai.BadRequestError as exc:
                # Most servers ignore stream_options they do not know; a few refuse it.
                if self.stream_options is not None and "stream_options" in str(exc.message):
                    self.stream_options = None
                    continue
                if offering:
                    raise _ToolsBroke from exc
                raise AnswerError(describe_error(exc)) from exc
            except openai.APIStatusError as exc:
                if offering and exc.status_code in (422, 500, 501):
                    raise _ToolsBroke from exc
                raise AnswerError(describe_error(exc)) from exc
            except openai.APIError as exc:
                raise AnswerError(describe_error(exc)) from exc
        cleaner = TemplateFilter()
        try:
            with stream:
                for chunk in stream:
                    usage = getattr(chunk, "usage", None)
                    if usage is not None:
                        turn.usage = (usage.prompt_tokens or 0, usage.completion_tokens or 0)
                    for choice in (getattr(chunk, "choices", None) or [])[:1]:
                        delta = choice.delta
                        if delta is not None and delta.content:
                            yield from self._text(turn, cleaner.feed(delta.content), after, go_on)
                        for piece in (delta.tool_calls if delta is not None else None) or []:
                            index = piece.index if piece.index is not None else len(turn.calls)
                            call = turn.calls.setdefault(index, _Call())
                            call.id = piece.id or call.id
                            if piece.function is not None:
                                call.name += piece.function.name or ""
                                call.arguments += piece.function.arguments or ""
                        if choice.finish_reason:
                            turn.finish_reason = choice.finish_reason
        except openai.APIConnectionError as exc:
            # The connection broke (a crash, a restart, a timeout): this answer failed, and the
            # breaker counted it; it says nothing about what the server supports.
            raise cut_off(exc) from exc
        except openai.APIError as exc:  # the server reported an error in the stream
            if offering and not turn.text:
                raise _ToolsBroke from exc
            raise cut_off(exc) from exc
        if turn.finish_reason is None:  # the stream ended without saying it was complete
            if offering and not turn.text:
                raise _ToolsBroke
            raise cut_off(None)
        yield from self._text(turn, cleaner.flush(), after, go_on)
        if cleaner.removed:
            logger.info("removed %s chat-template tokens from %s", cleaner.removed, self.model)
        generated = "".join(turn.text) + "".join(c.name + c.arguments for c in turn.calls.values())
        self.add_usage(turn.usage, prompt_tokens, generated)
        return turn

    @staticmethod
    def _text(turn: _Turn, text: str, after: str, go_on: bool) -> Iterator[Token]:
        """Append a piece of visible text; a new turn after text is set apart by a blank
        line, and a continuation after a cut by a space when a word would run on."""
        if not text:
            return
        if not turn.text and after and not after[-1].isspace():
            joint = (" " if text[0].isalnum() else "") if go_on else "\n\n"
            if joint:
                turn.text.append(joint)
                yield Token(joint)
        turn.text.append(text)
        yield Token(text)

    def _run_tools(
        self, calls: list[_Call], by_name: dict[str, Tool], context: AnswerRequest
    ) -> Generator[Event, None, tuple[list[str], list[str]]]:
        results: list[str] = []
        summaries: list[str] = []
        for i, call in enumerate(calls):
            if i >= CALLS_PER_ROUND:
                results.append(f"Skipped: at most {CALLS_PER_ROUND} tool calls at once.")
                summaries.append("skipped")
                continue
            result = yield from self._run_tool(call, by_name, context)
            results.append(result.content)
            summaries.append(result.summary)
        return results, summaries

    def _run_tool(
        self, call: _Call, by_name: dict[str, Tool], context: AnswerRequest
    ) -> Generator[Event, None, ToolResult]:
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            arguments = None
        started = time.perf_counter()
        tool = by_name.get(call.name)
        if tool is None:
            known = ", ".join(by_name)
            result = ToolResult(
                f"There is no tool {call.name[:64]!r}; use {known}.", "Bad tool call"
            )
        else:
            result = tool.run(context, call.arguments)
        yield ToolActivity(
            name=call.name[:64],
            arguments=arguments if isinstance(arguments, dict) else {},
            summary=result.summary,
            seconds=round(time.perf_counter() - started, 3),
            results=len(result.passages),
        )
        return result

    def add_usage(self, usage: tuple[int, int] | None, prompt: int, generated: str) -> None:
        # Servers that ignore stream_options send no usage: count what was sent and received.
        if usage is None:
            self.estimated = True
        prompt_tokens, completion_tokens = usage or (prompt, self.count(generated))
        self.usage["prompt_tokens"] += prompt_tokens
        self.usage["completion_tokens"] += completion_tokens

    def _usage(self) -> dict[str, int]:
        usage = dict(self.usage)
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if self.estimated:
            usage["estimated"] = True  # counted here: the server did not say
        return usage

    # --- Phase 2: metadata and quotes

    def _finish(self, question: str, answer: str, context: AnswerRequest) -> Finished:
        messages = self._metadata_messages(question, answer, context)
        data = request_metadata(self, messages, min(self.max_tokens, METADATA_TOKENS)) or {}
        confidence = data.get("confidence")
        follow_ups = data.get("follow_ups")
        answerable = data.get("answerable")
        quotes: dict[int, list[str]] = {}
        citations = data.get("citations")
        for item in citations[:50] if isinstance(citations, list) else []:
            n, quote = (item.get("n"), item.get("quote")) if isinstance(item, dict) else (0, 0)
            if type(n) is int and isinstance(quote, str) and quote.strip():
                quotes.setdefault(n, []).append(quote.strip()[:2000])
        back_claims(answer, context.sources, quotes)
        return Finished(
            confidence=confidence if confidence in prompts.CONFIDENCES else "",
            follow_ups=[
                " ".join(q.split())[:300]
                for q in (follow_ups if isinstance(follow_ups, list) else [])
                if isinstance(q, str) and q.strip()
            ][:3],
            usage=self._usage(),
            abstained=answerable is False,
            quotes=quotes,
        )

    def _metadata_messages(
        self, question: str, answer: str, context: AnswerRequest
    ) -> list[ChatMessage]:
        sources = context.sources
        numbers = [n for n in cited_numbers(answer) if 1 <= n <= len(sources)]
        numbers = numbers or list(range(1, len(sources) + 1))
        budget = self.budget + self.max_tokens - min(self.max_tokens, METADATA_TOKENS)
        chars = METADATA_SOURCE_CHARS
        while True:
            blocks = "\n".join(
                f'<source id="{n}">\n{str(sources[n - 1]["text"])[:chars]}\n</source>'
                for n in numbers
            )
            user = prompts.METADATA_USER.format(
                question=question, answer=answer, sources=blocks or "(none)"
            )
            messages = [
                {"role": "system", "content": prompts.METADATA_SYSTEM},
                {"role": "user", "content": user},
            ]
            if chars <= 100 or self.size(messages, []) <= budget:
                return messages
            chars //= 2


def _has_calls(rounds: list[_Round], form: Form) -> bool:
    """Native tool messages need the tools declared even when no more calls are allowed."""
    return form == "native" and bool(rounds)


def _assistant_message(text: str, calls: list[_Call]) -> ChatMessage:
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments or "{}"},
            }
            for call in calls
        ],
    }
