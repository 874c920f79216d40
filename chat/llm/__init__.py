"""The chat-model answerer on any OpenAI-compatible server (see chat.llm.answerer)."""

from __future__ import annotations

from chat.llm.answerer import LLMAnswerer
from chat.llm.server import describe_error, forget_servers, parse_json_object, token_counter

__all__ = ["LLMAnswerer", "describe_error", "forget_servers", "parse_json_object", "token_counter"]
