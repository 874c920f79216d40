"""Fitting a chat request into the model's context window (CHAT_CONTEXT_TOKENS) beside the
answer, slot by slot: the system prompt (with the mode), memories, summaries of compacted older
turns, the history (the last messages), and the retrieved passages. When it does not fit, the
oldest history goes first, then the summaries oldest first, then the memories least important
first, then the longest source blocks are cut; the system prompt, the question and the framing
around sources are never cut. `slots` reports what each slot came to (saved on the answer)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chat import prompts

logger = logging.getLogger(__name__)

ChatMessage = dict[str, Any]
MIN_TOOL_TOKENS = 64  # a source block is never cut below this
MESSAGE_OVERHEAD = 4  # role and separators of one chat message (OpenAI's accounting)
REPLY_OVERHEAD = 3
TRUNCATED = "\n[… cut to fit the model's context]"


@dataclass
class Framed:
    """A message carrying sources: only `body` may be cut to fit the context. The question's
    message also carries the earlier context before `head`, as data: memories (most important
    first) and summaries (oldest first), each dropped whole to fit."""

    head: str
    body: str
    tail: str = ""
    memories: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)

    @property
    def content(self) -> str:
        earlier = prompts.memories_block(self.memories) + prompts.summaries_block(self.summaries)
        return earlier + self.head + self.body + self.tail


class ContextBudget:
    """Token counting and fitting for an answerer that sets `count`, `budget` (tokens a prompt
    may use), `history_left` (history messages after the system prompt) and `framed`
    (id(message) → its parts, for messages carrying sources)."""

    count: Callable[[str], int]
    budget: int
    history_left: int
    framed: dict[int, Framed]
    dropped: dict[str, int]  # what the last _fit left out, per slot

    def _message_size(self, message: ChatMessage) -> int:
        size = MESSAGE_OVERHEAD + self.count(message.get("content") or "")
        for call in message.get("tool_calls") or []:
            size += self.count(call["function"]["name"] + call["function"]["arguments"]) + 3
        return size

    def size(self, messages: list[ChatMessage], schema: list[dict[str, Any]]) -> int:
        tools = self.count(json.dumps(schema)) if schema else 0
        return REPLY_OVERHEAD + tools + sum(self._message_size(m) for m in messages)

    def _fit(self, messages: list[ChatMessage], schema: list[dict[str, Any]]) -> None:
        """Make the prompt fit beside the answer: drop the oldest history, then the oldest
        summaries, then the least important memories, then cut the longest source blocks.
        messages[1 : 1 + history_left] is what is left of the history."""
        self.dropped = {"history": 0, "summaries": 0, "memories": 0}
        total = self.size(messages, schema)
        history = self.history_left
        while total > self.budget and self.history_left:
            total -= self._message_size(messages.pop(1))
            self.history_left -= 1
            if self.history_left and messages[1]["role"] == "assistant":
                total -= self._message_size(messages.pop(1))  # keep user/assistant pairs
                self.history_left -= 1
        self.dropped["history"] = history - self.history_left
        for message in messages:
            framed = self.framed.get(id(message))
            if framed is None:
                continue
            for slot, pile, which in (("summaries", framed.summaries, 0),
                                      ("memories", framed.memories, -1)):  # fmt: skip
                while total > self.budget and pile:
                    before = self._message_size(message)
                    pile.pop(which)
                    message["content"] = framed.content
                    total += self._message_size(message) - before
                    self.dropped[slot] += 1
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
            longest["content"] = framed.content
            total = self.size(messages, schema)
        if total > self.budget:
            logger.warning("chat prompt of %s tokens exceeds its budget of %s", total, self.budget)

    def slots(self, messages: list[ChatMessage], schema: list[dict[str, Any]]) -> dict[str, int]:
        """Tokens per slot of a fitted request, with the budget and what fitting dropped:
        `other` is the question, the framing, tool definitions and tool calls."""
        counts = {"system": self._message_size(messages[0]) if messages else 0,
                  "memories": 0, "summaries": 0,
                  "history": sum(map(self._message_size, messages[1 : 1 + self.history_left])),
                  "passages": 0}  # fmt: skip
        for message in messages:
            framed = self.framed.get(id(message))
            if framed is not None:
                counts["memories"] += self.count(prompts.memories_block(framed.memories))
                counts["summaries"] += self.count(prompts.summaries_block(framed.summaries))
                counts["passages"] += self.count(framed.body)
        total = self.size(messages, schema)
        dropped = getattr(self, "dropped", {})
        return {
            **counts,
            "other": max(0, total - sum(counts.values())),
            "total": total,
            "budget": self.budget,
            **{f"{slot}_dropped": n for slot, n in dropped.items()},
        }

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
