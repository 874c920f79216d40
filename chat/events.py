"""What an answerer yields while it works. The agent (chat.agent.generate) turns these into
saved message state and into events for the page (WebSocket) and the API (SSE)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Token:
    """A piece of the answer's Markdown, in order."""

    text: str


@dataclass
class ToolActivity:
    """A tool call: `summary` is what the page shows ("Searching documents for ‘…’")."""

    name: str
    arguments: dict[str, Any]
    summary: str
    seconds: float = 0.0
    results: int = 0


@dataclass
class Finished:
    """The answer is complete. `confidence` is high | medium | low; `abstained` means the
    sources did not contain the answer and the answer says so."""

    confidence: str = ""
    follow_ups: list[str] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    abstained: bool = False
    # Citation number → the exact sentences the answer quotes from that source. The agent
    # verifies each against the page (or note) text and shows only those it finds.
    quotes: dict[int, list[str]] = field(default_factory=dict)
    # The answer as it is saved, when cleaning changed what streamed (echoed prompt removed).
    text: str | None = None
    cut_short: bool = False  # the model stopped at the answer length limit
    # Tokens per context slot of the answer's last request (chat.llm.budget.slots): system,
    # memories, summaries, history, passages, other, total, budget, and *_dropped; the agent
    # saves it as metadata["context"]. Empty when no model was asked.
    context: dict[str, int] = field(default_factory=dict)
    # Further passages the offline answerer lists under its answer (or, when it abstains, as
    # the closest matches): kind, file, page, attachment_id, chunk_id, note_id, note_title,
    # heading, quote (a verbatim sentence) and preview; saved as metadata["related"].
    related: list[dict[str, Any]] = field(default_factory=list)


class AnswerError(Exception):
    """Generation failed in a way the user should read (LLM unreachable, refused, …). The
    question is kept; a retry re-runs it."""


Event = Token | ToolActivity | Finished
