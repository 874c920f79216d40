"""The OpenAI-compatible server behind the chat model, as every app uses it: the one client
setup, the errors a user reads, what each server turned out to support, and the one short
structured-JSON call (follow-up reformulation, memories, summaries, guides, profiles, search's
query expansion and document relevance).

Servers differ (docs/chat.md, "Servers"): several refuse `json_schema` output. What a server
failed at is remembered for the life of the process (per base URL and model), so each call
after the first goes straight to what works.

A JSON call never raises for a failing model: junk, invalid JSON, a refusal, an HTTP error
(429 included) or a timeout give `(None, reason)` and the caller falls back to its offline
path. Structured output falls back level by level: `json_schema`, then `json_object` with the
schema in the prompt, then a plain prompt parsed tolerantly (JSON inside prose or a code fence).
No SDK retries: a helper call is cheap to lose. Every call goes through the chat model's
circuit breaker ("llm", core.breakers): while it is open nothing is sent.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast
from urllib.parse import urlsplit

import openai
from django.conf import settings
from pydantic import BaseModel, ValidationError

from core import metrics
from core.breakers import breaker, settle_llm

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.chat.completion_create_params import ResponseFormat as FormatParam

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
DEFAULT_TIMEOUT = 20.0  # seconds: a helper call must not hold an answer up for long


@lru_cache(maxsize=8)
def client(base_url: str, api_key: str, timeout: float | None, max_retries: int) -> openai.OpenAI:
    """The SDK client for a server. With retries, the SDK retries connection errors, 408, 409,
    429 and 5xx itself (honouring Retry-After); callers whose breaker or fallback handles a
    failing server ask for none. `timeout` None: each request gives its own."""
    return openai.OpenAI(
        base_url=base_url or None,
        api_key=api_key or "not-needed",
        max_retries=max_retries,
        timeout=openai.NOT_GIVEN if timeout is None else timeout,
    )


# --- Errors


def host() -> str:
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
    where, model = host(), settings.CHAT_MODEL
    if isinstance(exc, openai.APITimeoutError):
        return (
            f"The language model at {where} did not answer within {waited(exc)}. "
            "It may be overloaded or loading the model; try again."
        )
    if isinstance(exc, openai.APIConnectionError):
        return (
            f"The language model at {where} did not answer. Check that the server is running "
            "and that OPENAI_BASE_URL is right."
        )
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return (
            f"The language model at {where} refused the API key (HTTP {exc.status_code}). "
            "Check OPENAI_API_KEY."
        )
    if isinstance(exc, openai.NotFoundError):
        return (
            f"The language model at {where} has no model named ‘{model}’ (HTTP 404). Check "
            "CHAT_MODEL, and that OPENAI_BASE_URL ends with /v1 if the server needs it."
        )
    if isinstance(exc, openai.RateLimitError):
        return f"The language model at {where} is busy (HTTP 429). Try again in a moment."
    if isinstance(exc, openai.APIStatusError):
        return (
            f"The language model at {where} failed (HTTP {exc.status_code}: "
            f"{' '.join(exc.message.split())[:200]}). Try again later."
        )
    return f"The language model at {where} failed: {' '.join(str(exc).split())[:200]}"


def allow() -> bool:
    """Whether the breaker lets a request through; True obliges the caller to `record`."""
    return breaker("llm").allow()


# --- What a server supports

ResponseFormat = Literal["json_schema", "json_object", "prompt"]
FORMATS: tuple[ResponseFormat, ...] = ("json_schema", "json_object", "prompt")
# Search's helpers ask for a JSON object with the schema in the prompt, then plain text.
SCHEMA_IN_PROMPT: tuple[ResponseFormat, ...] = ("json_object", "prompt")


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


# --- One short JSON call


def _format(name: str, schema: dict[str, Any], level: str) -> FormatParam | openai.Omit:
    if level == "json_schema":
        payload = {"name": name, "schema": schema, "strict": True}
        return cast("FormatParam", {"type": "json_schema", "json_schema": payload})
    if level == "json_object":
        return cast("FormatParam", {"type": "json_object"})
    return openai.omit


def json_call(
    *,
    name: str,
    system: str,
    user: str,
    model: type[M],
    max_tokens: int = 300,
    timeout: float = DEFAULT_TIMEOUT,
    levels: tuple[ResponseFormat, ...] | None = None,
) -> tuple[M | None, str]:
    """The model's reply to `system` + `user` as a validated `model`, or None and why
    ("no chat model", "circuit open", "timeout", "HTTP 429", "not JSON", …). `levels`: the
    structured-output levels to try in order; default from the best the server accepted so
    far (remembered for the next call)."""
    if not settings.CHAT_MODEL:
        return None, "no chat model"
    schema = model.model_json_schema()
    schema_text = json.dumps(schema, separators=(",", ":"))
    server = traits()
    remember = levels is None
    if levels is None:
        levels = FORMATS[FORMATS.index(server.response_format) :]
    api = client(settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY, None, 0)
    limit = min(timeout, float(settings.CHAT_TIMEOUT))
    if not allow():
        return None, "circuit open"
    answered = False  # any reply closes the breaker; else the last error counts
    error: openai.APIError | None = None
    try:
        for level in levels:
            prompt = (
                system
                if level == "json_schema"
                else f"{system}\nReply with JSON only, matching this schema: {schema_text}"
            )
            messages = [{"role": "system", "content": prompt}, {"role": "user", "content": user}]
            try:
                response = metrics.llm_call(
                    name,
                    api.chat.completions.create,
                    model=settings.CHAT_MODEL,
                    messages=cast("list[ChatCompletionMessageParam]", messages),
                    response_format=_format(name, schema, level),
                    max_tokens=max_tokens,
                    temperature=0,
                    timeout=limit,
                )
            except openai.APITimeoutError as exc:
                error = exc
                return None, "timeout"
            except openai.APIStatusError as exc:
                error = exc
                if exc.status_code in (400, 422, 500, 501) and level != levels[-1]:
                    logger.info("%s as %s refused (HTTP %s)", name, level, exc.status_code)
                    continue
                return None, f"HTTP {exc.status_code}"
            except openai.APIError as exc:
                error = exc
                return None, type(exc).__name__
            answered = True
            if remember and server.response_format != level:
                server.response_format = level
            choices = getattr(response, "choices", None) or []
            content = (choices[0].message.content if choices else None) or ""
            data = parse_json_object(content)
            if data is None:
                return None, "not JSON"
            try:
                return model.model_validate(data), ""
            except ValidationError as exc:
                logger.info("%s: the JSON has %s errors", name, exc.error_count())
                return None, "JSON does not match"
    finally:
        settle_llm(answered=answered, error=error)
    return None, "no reply"


def structured_call(
    *,
    name: str,
    system: str,
    user: str,
    model: type[M],
    max_tokens: int = 300,
    timeout: float = DEFAULT_TIMEOUT,
) -> M | None:
    """`json_call`'s reply, or None with why logged: for the helpers around an answer and the
    writing of guides and profiles, which must never fail their caller."""
    reply, why = json_call(
        name=name, system=system, user=user, model=model, max_tokens=max_tokens, timeout=timeout
    )
    if reply is None and why != "no chat model":
        level = logging.INFO if why == "circuit open" else logging.WARNING
        logger.log(level, "%s gave nothing: %s", name, why)
    return reply
