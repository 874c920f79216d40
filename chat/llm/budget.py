"""Fitting a chat request into the model's context window (CHAT_CONTEXT_TOKENS) beside the
answer: the oldest history goes first, then the longest source blocks are cut; the question and
the framing around sources are never cut."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

ChatMessage = dict[str, Any]
MIN_TOOL_TOKENS = 64  # a source block is never cut below this
MESSAGE_OVERHEAD = 4  # role and separators of one chat message (OpenAI's accounting)
REPLY_OVERHEAD = 3
TRUNCATED = "\n[… cut to fit the model's context]"


@dataclass
class Framed:
    """A message carrying sources: only `body` may be cut to fit the context."""

    head: str
    body: str
    tail: str = ""


class ContextBudget:
    """Token counting and fitting for an answerer that sets `count`, `budget` (tokens a prompt
    may use), `history_left` (history messages after the system prompt) and `framed`
    (id(message) → its parts, for messages carrying sources)."""

    count: Callable[[str], int]
    budget: int
    history_left: int
    framed: dict[int, Framed]

    def _message_size(self, message: ChatMessage) -> int:
        size = MESSAGE_OVERHEAD + self.count(message.get("content") or "")
        for call in message.get("tool_calls") or []:
            size += self.count(call["function"]["name"] + call["function"]["arguments"]) + 3
        return size

    def size(self, messages: list[ChatMessage], schema: list[dict[str, Any]]) -> int:
        tools = self.count(json.dumps(schema)) if schema else 0
        return REPLY_OVERHEAD + tools + sum(self._message_size(m) for m in messages)

    def _fit(self, messages: list[ChatMessage], schema: list[dict[str, Any]]) -> None:
        """Make the prompt fit beside the answer: drop the oldest history, then cut the longest
        source blocks. messages[1 : 1 + history_left] is what is left of the history."""
        total = self.size(messages, schema)
        while total > self.budget and self.history_left:
            total -= self._message_size(messages.pop(1))
            self.history_left -= 1
            if self.history_left and messages[1]["role"] == "assistant":
                total -= self._message_size(messages.pop(1))  # keep user/assistant pairs
                self.history_left -= 1
        while total > self.budget:
            cuttable = [m for m in messages if id(m) in self.framed]
            longest = max(cuttable, key=self._message_size, default=None)
            if longest is None:
                break
            framed = self.framed[id(longest)]
            size = self.count(framed.body)
            target = max(MIN_TOOL_TOKENS, size - (total - self.budget))
            if size <= target:
                break  # every block is as short as it may be; send it and let the server judge
            framed.body = self._truncate(framed.body, target)
            longest["content"] = framed.head + framed.body + framed.tail
            total = self.size(messages, schema)
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
