"""The offline answerer: no language model, only the sources' own sentences.

It runs `document_search` (and, in a notebook chat, `note_search`) through the same tool
registry as the chat model, splits the best passages into sentences, scores each sentence by
embedding similarity to the question, by how many of the question's words it covers and by
whether it holds the kind of answer asked for (chat.grounding, chat.answer_types), and
answers with the best few, verbatim, each with its [n] citation. When nothing scores well
enough it says plainly that the sources do not contain the answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from chat.events import Event, Finished, Token
from chat.grounding import (
    ABSTAIN_SIMILARITY,
    Candidate,
    Evidence,
    key_terms,
    salient_terms,
    search_first,
    sentences,
    terms,
    weigh,
)
from chat.modes import ModeSpec, spec
from chat.tools import ToolContext

__all__ = ["ABSTAIN_TEXT", "ExtractiveAnswerer", "abstention", "sentences", "words"]

MAX_PER_PASSAGE = 2
# In a follow-up, what the previous answer already quoted gives way to a sentence that scores
# about as well (a tie-breaker: sentences score 0.3-0.8): the follow-up asks for something
# new. docs/chat.md has the sweep (0.03-0.2) this was chosen from.
SAID_PENALTY = 0.05
FOLLOWING_FLOOR = 0.5  # share of the best sentence's score the sentence after it must reach
# A best sentence this close to the question mostly restates it ("Various environment
# variables can be set to determine where R creates its temporary directory."): the sentence
# after it comes along whenever it is about the question at all (ABSTAIN_SIMILARITY).
RESTATEMENT_SIMILARITY = 0.8
ABSTAIN_TEXT = (
    "The sources don't seem to contain an answer to this question. Try other words, or check "
    "that the right PDFs are attached and ready."
)
# What would turn a verbatim sentence into markup: inline Markdown and HTML, a backslash only
# where CommonMark reads it as an escape or a line break (before ASCII punctuation or at the
# end), "_" only at a word's edge (inside a word it never emphasises), "&" before an entity.
# "\documentclass" and "INT_MIN" stay as the page has them in the answer's Markdown, which
# the API returns and people copy.
_MARKDOWN_SPECIAL = re.compile(
    r"[`*\[\]<>|~]|\\(?=[!-/:-@\[-`{-~]|$)|(?<![^\W_])_|_(?![^\W_])|&(?=#?\w+;)", re.MULTILINE
)
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
    """Text that is already whole as tokens a paragraph at a time (each quoted sentence of an
    extractive answer, with the blank line after it): the page shows it sentence by sentence.
    Every token is one event through the channel layer to every open page; a word at a time
    made ~100 of them per answer, which under 20 answers at once cost more than the answers."""
    for piece in re.findall(r"[^\n]+\n*|\n+", text):
        yield Token(piece)


def _escape(text: str) -> str:
    """A verbatim sentence shown as plain text inside Markdown."""
    escaped = _MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(0), text)

    def guard(match: re.Match[str]) -> str:
        marker = match.group(2)
        return match.group(1) + (marker[:-1] + "\\" + marker[-1])

    return _LINE_START.sub(guard, escaped)


class ExtractiveAnswerer:
    name = "extractive"

    def __init__(self, notice: str = "") -> None:
        self.notice = notice  # set when it stands in for an unavailable chat model

    def run(
        self, question: str, history: list[tuple[str, str]], context: ToolContext
    ) -> Iterator[Event]:
        results = yield from search_first(question, context)
        passages = [p for result in results for p in result.passages]
        mode = spec(context.mode)
        # A follow-up is weighed against the question completed from the thread; the names
        # the sources must contain are the question's own.
        asked = context.search_focus or context.search_query or question
        evidence = weigh(asked, passages, context, names_from=question)
        chosen = self._choose(evidence, mode, said=context.said)
        if not chosen:
            yield from words(abstention(evidence))
            yield Finished(confidence="low", follow_ups=[], abstained=True)
            return
        confidence = self._confidence(evidence.best, chosen)
        lines = [f"{_escape(c.text)} [{c.n}]" for c in chosen]
        if mode.name == "research" and confidence != "high":
            lines.append("*The sources support this only in part: check the cited pages.*")
        if mode.name == "learning":
            lines.append(f"*Check yourself:* {_escape(self._check_question(chosen, passages))}")
        yield from words("\n\n".join(lines))
        quotes: dict[int, list[str]] = {}
        for c in chosen:
            quotes.setdefault(c.n, []).append(c.text)
        yield Finished(
            confidence=confidence,
            follow_ups=self._follow_ups(asked, passages, chosen, context, names_from=question),
            abstained=False,
            quotes=quotes,
        )

    @staticmethod
    def _choose(
        evidence: Evidence, mode: ModeSpec, said: set[str] | None = None
    ) -> list[Candidate]:
        """The best few sentences (as many as the mode quotes, above its share of the best
        score), at most MAX_PER_PASSAGE from one passage, none inside another; nothing when
        the evidence does not support an answer. Learning puts a definition first. In a
        follow-up, the sentences the previous answer quoted (`said`) count SAID_PENALTY less."""
        best = evidence.best
        if best is None or not evidence.supported:
            return []
        chosen: list[Candidate] = []
        per_passage: dict[int, int] = {}
        floor = best.score * mode.sentence_floor
        if mode.name == "learning":
            definition = next(
                (c for c in evidence.ranked[:12]
                 if c.score >= best.score * 0.5 and _DEFINITION.search(c.text)),
                None,
            )  # fmt: skip
            if definition is not None:
                chosen.append(definition)
                per_passage[definition.n] = 1
        said = said or set()

        def score(c: Candidate) -> float:
            return c.score - (SAID_PENALTY if c.text in said else 0.0)

        # At most MAX_PER_PASSAGE from one passage while others have sentences above the
        # floor; then, if the answer is still short, more from the same passages.
        strong = [c for c in sorted(evidence.ranked, key=lambda c: -score(c)) if score(c) >= floor]
        for capped in (True, False):
            for c in strong:
                if len(chosen) == mode.max_sentences:
                    break
                if not _new(c, chosen):
                    continue
                if capped and per_passage.get(c.n, 0) >= MAX_PER_PASSAGE:
                    continue
                chosen.append(c)
                per_passage[c.n] = per_passage.get(c.n, 0) + 1
        # The best sentence often restates the question and the source answers right after
        # it ("… Not a Number, NaN, values." then "… is.nan(xx) is only TRUE for NaNs."): it
        # brings the sentence that follows it in its passage, unless that one is weak.
        by_place = {(c.n, c.position): c for c in evidence.ranked}
        after = by_place.get((best.n, best.position + 1))
        restates = best.similarity >= RESTATEMENT_SIMILARITY
        if (
            chosen and chosen[0] is best and after is not None and _new(after, chosen)
            and (after.score >= best.score * FOLLOWING_FLOOR
                 or (restates and after.similarity >= ABSTAIN_SIMILARITY))
        ):  # fmt: skip
            chosen.append(after)
        # A sentence that leans on the one before it ("This is the only way to …") brings
        # that sentence along: it names what "this" is.
        for c in list(chosen):
            before = by_place.get((c.n, c.position - 1))
            leans = _LEANS_BACK.match(c.text) and not _EXPLETIVE.match(c.text)
            if leans and before is not None and _new(before, chosen):
                chosen.append(before)
        # Read in the sources' order: by passage rank, then position in the passage (a
        # learning answer's definition stays first).
        if mode.name == "learning" and chosen and _DEFINITION.search(chosen[0].text):
            return chosen[:1] + sorted(chosen[1:], key=lambda c: (c.rank, c.position))
        return sorted(chosen, key=lambda c: (c.rank, c.position))

    @staticmethod
    def _check_question(chosen: list[Candidate], passages: list[dict[str, Any]]) -> str:
        """A question the reader answers to check their understanding (learning mode)."""
        names = [t for c in chosen for t in key_terms(c.text)]
        if names:
            return f"In your own words, what does “{names[0]}” do, and when would you use it?"
        heading = next((h for h in (_heading(p) for p in passages) if h), "")
        if heading:
            return f"Can you explain in your own words what “{heading}” is about?"
        return "Can you restate the answer in your own words, without looking?"

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
        question: str, passages: list[dict[str, Any]], chosen: list[Candidate],
        context: ToolContext, names_from: str = "",
    ) -> list[str]:  # fmt: skip
        """Questions the sources can answer next: sections near the answer that the question
        did not ask about (real headings only, each found again by a keyword search), and a
        name the user asked about (`names_from`, default the question; not the words a
        follow-up's completion added) that the answer did not cover, when the sources have
        it."""
        from search.retrieval import phrase_occurs, search

        scope = context.scope()
        asked = terms(question)
        out: list[str] = []
        for heading in dict.fromkeys(_heading(p) for p in passages):
            if len(out) == 2:
                break
            if not heading or terms(heading) <= asked or not _real_heading(heading):
                continue
            found = search(user=context.user, query=heading, scope=scope, limit=1,
                           mode="lexical", rerank=False)  # fmt: skip
            if found.hits:
                out.append(f"What does the section “{heading}” say?")
        covered = set().union(*(terms(c.text) for c in chosen)) if chosen else set()
        # Only a name or code the question gives (not "also", "work", …) is worth a search.
        missing = [
            w for w in salient_terms(names_from or question) if terms(w) and not terms(w) <= covered
        ]
        for word in missing[:2]:
            if len(out) < 3 and phrase_occurs(user=context.user, phrase=word, scope=scope):
                out.append(f"Where do the sources mention “{word}”?")
                break
        return out[:3]


_LEANS_BACK = re.compile(
    r"^\W*(?:this|these|that|those|such|it|its|they|their|then|here|there|thus|hence|"
    r"dies|diese|dieser|dieses|das|es|damit|dazu|"
    r"这|该|它|此|其)\b|^\W*(?:这|该|它|此|其)",
    re.IGNORECASE,
)
# "It is quite common for a file …": an "it" that stands for nothing before it.
_EXPLETIVE = re.compile(
    r"^\W*it(?: is|'s| was| may be| might be| can be| would be| will be| seems) (?:\w+ ){0,2}?"
    r"(?:common|possible|impossible|necessary|important|easy|easier|hard|difficult|useful|"
    r"best|better|advisable|recommended|customary|usual|likely|unlikely|worth|convenient|"
    r"sensible|wise|essential|clear|true|not)\b",
    re.IGNORECASE,
)
_DEFINITION = re.compile(
    r"^\W*[\w.()\\-]+(?: [\w.()\\-]+){0,4} (?:is|are|means|refers to|ist|sind|bezeichnet) "
    r"|(?:是指|是一种|是一个|称为)"
)
_LIST_OR_NOTE = re.compile(
    r"^\s*(?:\d+[.)]\s+\S.*[.:;]$|[•*(\-–]|\d+\s+[A-Z][a-z]+ [a-z]+ [a-z]+ )"
)


def _new(candidate: Candidate, chosen: list[Candidate]) -> bool:
    """Whether a sentence adds to those chosen: not one of them, nor inside one, nor holding
    one (passages overlap, so the same words come from two of them)."""
    return candidate not in chosen and not any(
        candidate.text in other.text or other.text in candidate.text for other in chosen
    )


def _heading(passage: dict[str, Any]) -> str:
    return str(passage.get("heading") or "").split(" › ")[-1].strip()


def _real_heading(heading: str) -> bool:
    """A heading worth suggesting: short, not a sentence, a list item or a footnote."""
    if not 3 <= len(heading) <= 80 or heading.endswith((".", ",", ";", ":")):
        return False
    return not _LIST_OR_NOTE.search(heading) and len(heading.split()) <= 10
