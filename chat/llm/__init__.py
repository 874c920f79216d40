"""The chat-model answerer on any OpenAI-compatible server (see chat.llm.answerer)."""

from __future__ import annotations

from chat.llm.answerer import LLMAnswerer
from chat.llm.server import token_counter

__all__ = ["LLMAnswerer", "token_counter"]
