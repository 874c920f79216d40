"""The offline answerer: no language model, only the sources' own sentences.

It runs `document_search` (and, in a notebook chat, `note_search`) through the same tool
registry as the chat model, splits the best passages into sentences, scores each sentence by
embedding similarity to the question and by how many of the question's words it covers, and
answers with the best few, verbatim, each with its [n] citation. When nothing scores well
enough it says plainly that the sources do not contain the answer.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from chat.events import Event, Finished, Token, ToolActivity
from chat.tools import ToolContext, tools_for
from notebook.embeddings import get_embedder
from notebook.textutil import cjk_ratio

SEARCH_LIMIT = 6
MAX_SENTENCES = 3
MAX_PER_PASSAGE = 2
MIN_SENTENCE_CHARS = 25
MAX_SENTENCE_CHARS = 600
# Below both, the best sentence is not an answer: abstain. Chosen on ../shared/eval with
# `manage.py evaluate_answers` (see docs/chat.md).
ABSTAIN_SIMILARITY = 0.35
ABSTAIN_COVERAGE = 0.5
ABSTAIN_TEXT = (
    "The sources don't seem to contain an answer to this question. Try other words, or check "
    "that the right PDFs are attached and ready."
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9\u00C0-\u024F])|(?<=[。！？；])")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")  # inline Markdown and HTML
_LINE_START = re.compile(r"^(\s*)([#>+\-]|\d+[.)])")  # a heading, quote or list if first
_STOP_WORDS = (
    "a an and are as at be but by can could do does did for from had has have how i if in into "
    "is it its me my no not of on or our so than that the then there these they this to was we "
    "what when where which who whom why will with would you your about should may might must "
    "der die das und ist ein eine zu von mit wie was welche welcher den dem des im auf für"
)
_STOP = frozenset(_STOP_WORDS.split())


# Terms a question names exactly: code (install_github, devtools::x, f()), CamelCase or
# ALLCAPS names, versions, and Latin words given in brackets inside CJK text.
_KEY_TERM = re.compile(
    r"[\w.:]*(?:_|::|\(\))[\w.:()]*"  # code: snake_case, pkg::fn, call()
    r"|\b[A-Z][a-z]+[A-Z]\w*"  # CamelCase (MusicXML, GitHub)
    r"|\b[A-Z]{3,}\b"  # acronyms (PDF, HTML)
    r"|(?:(?<=（)|(?<=[\u4e00-\u9fff]\())[A-Za-z][A-Za-z -]{2,30}(?=[)）])"  # 海报（poster）
)


def key_terms(question: str) -> list[str]:
    found = [m.group(0).strip(" .:()") for m in _KEY_TERM.finditer(question)]
    return [t for t in dict.fromkeys(found) if len(t) >= 3]


def absent_key_terms(question: str, context: ToolContext) -> list[str]:
    """Key terms of the question that occur nowhere in the chat's sources. A question about
    `devtools::install_github()` or MusicXML cannot be answered by sources that never say
    so, however similar their other sentences look."""
    from attachments.retrieval import Scope, phrase_occurs

    scope = Scope(
        notebook_id=context.notebook.pk,
        note_id=context.note.pk if context.note else None,
        include_notes=context.note is None,
    )
    return [
        term
        for term in key_terms(question)
        if not phrase_occurs(user=context.user, phrase=term, scope=scope)
    ]


@dataclass
class Candidate:
    n: int  # citation number of its passage
    rank: int  # the passage's rank in search (0 = best)
    position: int  # order within the passage
    text: str
    similarity: float = 0.0
    coverage: float = 0.0

    @property
    def score(self) -> float:
        return 0.6 * self.similarity + 0.4 * self.coverage + 0.05 / (1 + self.rank)


@cache
def _stemmer() -> Any:
    import Stemmer

    return Stemmer.Stemmer("english")


def terms(text: str) -> set[str]:
    """The content words of a text, stemmed (Chinese cut into words with jieba)."""
    if cjk_ratio(text) > 0.1:
        import jieba

        jieba.setLogLevel(60)
        words = [w.strip().lower() for w in jieba.cut_for_search(text)]
        return {w for w in words if w and re.search(r"\w", w) and w not in _STOP}
    words = [w for w in re.findall(r"\w+", text.lower()) if len(w) > 1 and w not in _STOP]
    return set(_stemmer().stemWords(words))


_NUMBERED_HEADING = re.compile(r"^\s*\d+(?:\.\d+)*\.?\s+\S.{0,70}$")


def sentences(text: str) -> list[str]:
    """Sentences of a passage, whitespace collapsed; numbered headings ("5.2 Changing
    linebreaks") kept apart from the sentence after them; list markers and page furniture
    dropped."""
    lines = text.splitlines()
    blocks: list[str] = []
    current: list[str] = []
    for line in lines:
        if _NUMBERED_HEADING.match(line) and not line.rstrip().endswith((".", ",", ";")):
            blocks += [" ".join(current), line]
            current = []
        else:
            current.append(line)
    blocks.append(" ".join(current))
    out = []
    for piece in (p for block in blocks for p in _SENTENCE_END.split(" ".join(block.split()))):
        piece = piece.strip()
        letters = sum(ch.isalpha() for ch in piece)
        if MIN_SENTENCE_CHARS <= len(piece) <= MAX_SENTENCE_CHARS and letters >= len(piece) * 0.5:
            out.append(piece)
    return out


def _escape(text: str) -> str:
    """A verbatim sentence shown as plain text inside Markdown."""
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", text)

    def guard(match: re.Match[str]) -> str:
        marker = match.group(2)
        return match.group(1) + (marker[:-1] + "\\" + marker[-1])

    return _LINE_START.sub(guard, escaped)


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


class ExtractiveAnswerer:
    name = "extractive"

    def run(
        self, question: str, history: list[tuple[str, str]], context: ToolContext
    ) -> Iterator[Event]:
        passages: list[dict[str, Any]] = []
        tools = {tool.name: tool for tool in tools_for(context)}
        searches: list[tuple[str, dict[str, Any]]] = [
            ("document_search", {"query": question, "limit": SEARCH_LIMIT})
        ]
        if "note_search" in tools:
            searches.append(("note_search", {"query": question}))
        for name, arguments in searches:
            started = time.perf_counter()
            result = tools[name].run(context, arguments)
            seconds = time.perf_counter() - started
            passages += result.passages
            yield ToolActivity(name, arguments, result.summary, seconds, len(result.passages))

        missing = absent_key_terms(question, context)
        chosen, best = self._choose(question, passages) if not missing else ([], None)
        if not chosen:
            reason = (
                f"The sources never mention “{missing[0]}”, so they can't answer this. "
                if missing
                else ""
            )
            yield from self._words(_escape(reason) + ABSTAIN_TEXT)
            yield Finished(confidence="low", follow_ups=[], abstained=True)
            return
        lines = [f"{_escape(c.text)} [{c.n}]" for c in chosen]
        yield from self._words("\n\n".join(lines))
        quotes: dict[int, list[str]] = {}
        for c in chosen:
            quotes.setdefault(c.n, []).append(c.text)
        yield Finished(
            confidence=self._confidence(best, chosen),
            follow_ups=self._follow_ups(question, passages, chosen),
            abstained=False,
            quotes=quotes,
        )

    @staticmethod
    def _words(text: str) -> Iterator[Token]:
        for piece in re.findall(r"\S+\s*|\s+", text):
            yield Token(piece)

    def _choose(
        self, question: str, passages: list[dict[str, Any]]
    ) -> tuple[list[Candidate], Candidate | None]:
        wanted = terms(question)
        candidates = [
            Candidate(int(p["n"]), rank, position, sentence)
            for rank, p in enumerate(passages)
            for position, sentence in enumerate(sentences(str(p["text"])))
        ]
        if not candidates:
            return [], None
        vectors = get_embedder().embed([question, *(c.text for c in candidates)])
        for c, vector in zip(candidates, vectors[1:], strict=True):
            c.similarity = _cosine(vectors[0], vector)
            c.coverage = len(wanted & terms(c.text)) / len(wanted) if wanted else 0.0
        ranked = sorted(candidates, key=lambda c: -c.score)
        best = ranked[0]
        if best.similarity < ABSTAIN_SIMILARITY and best.coverage < ABSTAIN_COVERAGE:
            return [], best
        chosen: list[Candidate] = []
        per_passage: dict[int, int] = {}
        floor = best.score * 0.75
        for c in ranked:
            if len(chosen) == MAX_SENTENCES or c.score < floor:
                break
            if per_passage.get(c.n, 0) >= MAX_PER_PASSAGE or any(
                c.text in o.text or o.text in c.text for o in chosen
            ):
                continue
            chosen.append(c)
            per_passage[c.n] = per_passage.get(c.n, 0) + 1
        # Read in the sources' order: by passage rank, then position in the passage.
        return sorted(chosen, key=lambda c: (c.rank, c.position)), best

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
