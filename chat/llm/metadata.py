"""Phase 2 of a model answer: one request for confidence, follow-up questions, whether the
sources answer the question, and the exact sentence behind each [n].

Structured output falls back level by level, one attempt each and none of the SDK's own
retries: `json_schema`, then `json_object` with the schema in the prompt, then a plain prompt
whose reply is parsed tolerantly. Any HTTP error moves down a level (servers answer 400, 422
or 500 for what they do not support); the level that worked is remembered for the server.
The request goes through the chat model's circuit breaker (chat.llm.server): while it is open
the answer stands without metadata, and a call that gets no reply counts as one failure.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, cast

import openai

from chat import prompts
from core import metrics
from core.breakers import settle_llm
from core.llm import FORMATS, allow, describe_error, parse_json_object, traits

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.chat.completion_create_params import ResponseFormat as FormatParam

    from chat.llm.answerer import LLMAnswerer
    from chat.llm.budget import ChatMessage

logger = logging.getLogger(__name__)
SCHEMA_TEXT = json.dumps(prompts.METADATA_FORMAT["json_schema"]["schema"], separators=(",", ":"))


def _request(
    messages: list[ChatMessage], level: str
) -> tuple[list[ChatMessage], FormatParam | openai.Omit]:
    if level == "json_schema":
        return messages, cast("FormatParam", prompts.METADATA_FORMAT)
    # Without a schema the server enforces, the prompt carries it.
    system = {
        "role": "system",
        "content": f"{messages[0]['content']}\nThe JSON must match this schema: {SCHEMA_TEXT}",
    }
    fitted = [system, *messages[1:]]
    if level == "json_object":
        return fitted, cast("FormatParam", {"type": "json_object"})
    return fitted, openai.omit


def request_metadata(
    answerer: LLMAnswerer, messages: list[ChatMessage], max_tokens: int
) -> dict[str, Any] | None:
    """The phase-2 JSON, or None when the server cannot give it (the answer stands)."""
    server = traits()
    client = answerer.client.with_options(max_retries=0)
    if not allow():
        logger.info("answer metadata skipped: the language model is failing (circuit open)")
        return None
    answered = False  # any reply closes the breaker; else the last error counts
    error: openai.APIError | None = None
    try:
        for level in FORMATS[FORMATS.index(server.response_format) :]:
            sent, response_format = _request(messages, level)
            prompt = answerer.size(sent, [])
            try:
                response = metrics.llm_call(
                    "answer_metadata",
                    client.chat.completions.create,
                    model=answerer.model,
                    messages=cast("list[ChatCompletionMessageParam]", sent),
                    response_format=response_format,
                    max_tokens=max_tokens,
                )
            except openai.APIStatusError as exc:
                error = exc
                logger.info("answer metadata as %s refused (HTTP %s)", level, exc.status_code)
                continue
            except openai.APIError as exc:
                error = exc
                logger.warning("answer metadata failed: %s", describe_error(exc))
                return None
            answered = True
            if server.response_format != level:
                logger.info("%s: structured output falls back to %s", answerer.model, level)
                server.response_format = level
            choices = getattr(response, "choices", None) or []
            content = (choices[0].message.content if choices else None) or ""
            usage = getattr(response, "usage", None)
            answerer.add_usage(
                (usage.prompt_tokens, usage.completion_tokens) if usage else None, prompt, content
            )
            return parse_json_object(content)
    finally:
        settle_llm(answered=answered, error=error)
    return None
