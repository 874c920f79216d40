"""One short JSON-only call to the chat model on OPENAI_BASE_URL, validated with pydantic, for
search's helpers (query expansion, per-document relevance). Like chat.llm.structured (which
search may not import: imports run chat → search) it never raises for a failing model: junk,
invalid JSON, a refusal, an HTTP error (429 included) or a timeout give `(None, reason)` and
the caller falls back. No SDK retries: a lost helper call is cheap.

The call goes through the chat model's circuit breaker ("llm", core.breakers) like every
chat request: while it is open nothing is sent (`(None, "circuit open")`, at once, instead of
every search waiting out the timeout of a model that is down), and timeouts, 429s and 5xx
count towards opening it.

The request asks for `json_object` with the schema in the prompt; a server that refuses
`response_format` (HTTP 400/422/500/501) is asked once more without it, and the reply is
parsed tolerantly (JSON inside prose or a code fence).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.conf import settings
from pydantic import BaseModel, ValidationError

from core import metrics
from core.breakers import breaker, settle_llm

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


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


def json_call(
    *, name: str, system: str, user: str, model: type[M], timeout: float, max_tokens: int = 200
) -> tuple[M | None, str]:
    """The model's validated reply, or None and why ("timeout", "HTTP 429", "not JSON", …)."""
    import openai

    from core.rerank import _openai_client

    if not settings.CHAT_MODEL:
        return None, "no chat model"
    schema = json.dumps(model.model_json_schema(), separators=(",", ":"))
    messages = [
        {"role": "system", "content": f"{system}\nReply with JSON only, matching: {schema}"},
        {"role": "user", "content": user},
    ]
    api = _openai_client(settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY)
    if not breaker("llm").allow():
        return None, "circuit open"
    formats: list[Any] = [{"type": "json_object"}, openai.omit]
    response = None
    error: openai.APIError | None = None
    try:
        for response_format in formats:
            try:
                response = metrics.llm_call(
                    name,
                    api.chat.completions.create,
                    model=settings.CHAT_MODEL,
                    messages=cast("list[ChatCompletionMessageParam]", messages),
                    response_format=response_format,
                    max_tokens=max_tokens,
                    temperature=0,
                    timeout=timeout,
                )
                error = None
                break
            except openai.APITimeoutError as exc:
                error = exc
                return None, "timeout"
            except openai.APIStatusError as exc:
                error = exc
                if exc.status_code in (400, 422, 500, 501) and response_format is not openai.omit:
                    continue
                return None, f"HTTP {exc.status_code}"
            except openai.APIError as exc:
                error = exc
                return None, type(exc).__name__
    finally:
        settle_llm(answered=response is not None, error=error)
    choices = getattr(response, "choices", None) or []
    content = (choices[0].message.content if choices else None) or ""
    data = parse_json_object(content)
    if data is None:
        logger.info("%s: the model's reply is not JSON", name)
        return None, "not JSON"
    try:
        return model.model_validate(data), ""
    except ValidationError as exc:
        logger.info("%s: the model's JSON does not match (%s errors)", name, exc.error_count())
        return None, "JSON does not match"
