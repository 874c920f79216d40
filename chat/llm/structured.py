"""One short JSON call to the chat model, validated with pydantic: for the helpers around an
answer (follow-up reformulation, memory extraction, summaries), which must never fail the
answer. Junk, invalid JSON, a refusal, an HTTP error or a timeout all give None and the caller
falls back to its offline path.

Structured output falls back level by level like phase 2 (chat.llm.metadata): `json_schema`,
then `json_object` with the schema in the prompt, then a plain prompt parsed tolerantly; the
level that worked is remembered for the server. No SDK retries: a helper call is cheap to lose.
While the chat model's circuit breaker is open (chat.llm.server) it gives None at once; a call
that gets no reply counts as one failure.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, TypeVar, cast

import openai
from django.conf import settings
from pydantic import BaseModel, ValidationError

from chat.llm.server import (
    FORMATS,
    allow,
    client,
    describe_error,
    parse_json_object,
    traits,
)
from core import metrics
from core.breakers import settle_llm

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.chat.completion_create_params import ResponseFormat as FormatParam

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
DEFAULT_TIMEOUT = 20.0  # seconds: a helper call must not hold an answer up for long


def _format(name: str, schema: dict[str, Any], level: str) -> FormatParam | openai.Omit:
    if level == "json_schema":
        payload = {"name": name, "schema": schema, "strict": True}
        return cast("FormatParam", {"type": "json_schema", "json_schema": payload})
    if level == "json_object":
        return cast("FormatParam", {"type": "json_object"})
    return openai.omit


def structured_call(
    *,
    name: str,
    system: str,
    user: str,
    model: type[M],
    max_tokens: int = 300,
    timeout: float = DEFAULT_TIMEOUT,
) -> M | None:
    """The model's reply to `system` + `user` as a validated `model`, or None (logged)."""
    if not settings.CHAT_MODEL:
        return None
    schema = model.model_json_schema()
    schema_text = json.dumps(schema, separators=(",", ":"))
    server = traits()
    api = client(settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY, float(settings.CHAT_TIMEOUT))
    api = api.with_options(max_retries=0, timeout=min(timeout, float(settings.CHAT_TIMEOUT)))
    if not allow():
        logger.info("%s skipped: the language model is failing (circuit open)", name)
        return None
    answered = False  # any reply closes the breaker; else the last error counts
    error: openai.APIError | None = None
    try:
        for level in FORMATS[FORMATS.index(server.response_format) :]:
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
                )
            except openai.APIStatusError as exc:
                error = exc
                if exc.status_code in (400, 422, 500, 501) and level != FORMATS[-1]:
                    logger.info("%s as %s refused (HTTP %s)", name, level, exc.status_code)
                    continue
                logger.warning("%s failed: %s", name, describe_error(exc))
                return None
            except openai.APIError as exc:
                error = exc
                logger.warning("%s failed: %s", name, describe_error(exc))
                return None
            answered = True
            if server.response_format != level:
                server.response_format = level
            choices = getattr(response, "choices", None) or []
            content = (choices[0].message.content if choices else None) or ""
            data = parse_json_object(content)
            if data is None:
                logger.warning("%s: the model's reply is not JSON", name)
                return None
            try:
                return model.model_validate(data)
            except ValidationError as exc:
                logger.warning("%s: the model's JSON does not match: %s", name, exc.error_count())
                return None
    finally:
        settle_llm(answered=answered, error=error)
    return None
