"""The offline answerer: no language model, only the sources' own sentences.

It runs `document_search` (and, in a notebook chat, `note_search`) through the same tool
registry as the chat model, splits the best passages into sentences, scores each sentence by
embedding similarity to the question and by how many of the question's words it covers, and
answers with the best few, verbatim, each with its [n] citation. When nothing scores well
enough it says plainly that the sources do not contain the answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from chat.events import Event, Finished, Token
from chat.grounding import Candidate, Evidence, search_first, sentences, terms, weigh
from chat.tools import ToolContext

__all__ = ["ABSTAIN_TEXT", "ExtractiveAnswerer", "abstention", "sentences", "words"]

MAX_SENTENCES = 3
MAX_PER_PASSAGE = 2
ABSTAIN_TEXT = (
    "The sources don't seem to contain an answer to this question. Try other words, or check "
    "that the right PDFs are attached and ready."
)
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")  # inline Markdown and HTML
_LINE_START = re.compile(r"^(\s*)([#>+\-]|\d+[.)])")  # a heading, quote or list if first


def abstention(evidence: Evidence, searched: list[str] | None = None) -> str:
    """What an answer says when the sources do not carry the answer (Markdown, escaped), and,
    given the searches' summaries, what was searched."""
    reason = (
        f"The sources never mention “{evidence.missing[0]}”, so they can't answer this. "
        if evidence.missing
        else ""
    )
    text = _escape(reason) + ABSTAIN_TEXT
    if searched:
        done = ", ".join(s.replace("Searching", "searched", 1) for s in searched)
        text += f"\n\n*{_escape(f'I {done}.')}*"
    return text


def words(text: str) -> Iterator[Token]:
    """Text as tokens a word at a time (with its following space), as if it streamed."""
    for piece in re.findall(r"\S+\s*|\s+", text):
        yield Token(piece)


def _escape(text: str) -> str:
    """A verbatim sentence shown as plain text inside Markdown."""
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", text)

    def guard(match: re.Match[str]) -> str:
        marker = match.group(2)
        return match.group(1) + (marker[:-1] + "\\" + marker[-1])

    return _LINE_START.sub(guard, escaped)


class ExtractiveAnswerer:
    name = "extractive"

    def run(
        self, question: str, history: list[tuple[str, str]], context: ToolContext
    ) -> Iterator[Event]:
        results = yield from search_first(question, context)
        passages = [p for result in results for p in result.passages]
        evidence = weigh(question, passages, context)
        chosen = self._choose(evidence)
        if not chosen:
            yield from words(abstention(evidence))
            yield Finished(confidence="low", follow_ups=[], abstained=True)
            return
        lines = [f"{_escape(c.text)} [{c.n}]" for c in chosen]
        yield from words("\n\n".join(lines))
        quotes: dict[int, list[str]] = {}
        for c in chosen:
            quotes.setdefault(c.n, []).append(c.text)
        yield Finished(
            confidence=self._confidence(evidence.best, chosen),
            follow_ups=self._follow_ups(question, passages, chosen),
            abstained=False,
            quotes=quotes,
        )

    @staticmethod
    def _choose(evidence: Evidence) -> list[Candidate]:
        """The best few sentences, at most MAX_PER_PASSAGE from one passage, none inside
        another; nothing when the evidence does not support an answer."""
        best = evidence.best
        if best is None or not evidence.supported:
            return []
        chosen: list[Candidate] = []
        per_passage: dict[int, int] = {}
        floor = best.score * 0.75
        for c in evidence.ranked:
            if len(chosen) == MAX_SENTENCES or c.score < floor:
                break
            if per_passage.get(c.n, 0) >= MAX_PER_PASSAGE or any(
                c.text in o.text or o.text in c.text for o in chosen
            ):
                continue
            chosen.append(c)
            per_passage[c.n] = per_passage.get(c.n, 0) + 1
        # Read in the sources' order: by passage rank, then position in the passage.
        return sorted(chosen, key=lambda c: (c.rank, c.position))

    @staticmethod
    def _confidence(best: Candidate | None, chosen: list[Candidate]) -> str:
        if best is None:
            return "low"
        if best.similarity >= 0.6 and best.coverage >= 0.6:
            return "high"
        if best.similarity >= 0.45 or best.coverage >= 0.6:
            return "medium"
        return "low"

    @staticmethod
    def _follow_ups(
        question: str, passages: list[dict[str, Any]], chosen: list[Candidate]
    ) -> list[str]:
        """Questions the sources can answer next: sections near the answer the question did
        not ask about, and the question's words the answer did not cover."""
        asked = terms(question)
        out: list[str] = []
        for p in passages:
            heading = str(p.get("heading") or "").split(" › ")[-1].strip()
            if heading and not (terms(heading) <= asked) and len(heading) <= 80:
                suggestion = f"What does the section “{heading}” say?"
                if suggestion not in out:
                    out.append(suggestion)
            if len(out) == 2:
                break
        covered = set().union(*(terms(c.text) for c in chosen)) if chosen else set()
        missing = [w for w in re.findall(r"\w+", question) if terms(w) and not terms(w) <= covered]
        if missing and len(out) < 3:
            out.append(f"Where do the sources mention “{missing[0]}”?")
        return out[:3]
