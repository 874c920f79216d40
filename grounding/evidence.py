"""Grounding: whether the passages found for a question carry its answer, by the same rule for
the offline answerer and the chat model, and which of their sentences back a claim.

The evidence rule (chosen on ../shared/eval with `manage.py evaluate_answers`, see
docs/chat.md): a question is unsupported when it names a key term (code, a CamelCase or
ALLCAPS name) that occurs nowhere in the chat's sources, or when no sentence of the passages
is close to it both in meaning (embedding similarity) and in words (share of the question's
content words it covers). Unsupported questions are refused before any model writes, so a
refusal never depends on a phrase in a model's text.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from django.conf import settings

from core.embeddings import get_embedder, warming_up
from core.language import content_terms, detect_language, language_of, split_sentences
from core.markdown import plain_text
from core.textutil import cjk_ratio, unhyphenated
from grounding.citations import MARKER
from grounding.sentence_vectors import embed_weighed, similarities
from search.retrieval import phrase_occurs

if TYPE_CHECKING:
    from core.types import User
    from search.retrieval import Scope


class Asking(Protocol):
    """Who asks and where (the chat's AnswerRequest is one): the user, the scope their sources
    are searched in, and, for a follow-up read in its conversation, the turn before's vector
    and words (`context_vector`, `context_text`, read when present)."""

    @property
    def user(self) -> User: ...

    def scope(self) -> Scope: ...


MIN_SENTENCE_CHARS = 25
MAX_SENTENCE_CHARS = 600
# Below both, the best sentence is not an answer: abstain.
ABSTAIN_SIMILARITY = 0.35
ABSTAIN_COVERAGE = 0.5
# A sentence of the cited source backs an answer's sentence when it shares at least this
# share of that sentence's content words (used when a model cites [n] without a quote).
BACKING_COVERAGE = 0.5
logger = logging.getLogger(__name__)


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


# A word opening in a capital inside a sentence (not after . ! ? : or a quote or bracket that
# opens one): "Peru", "Docker", "Kalythos".
_CAPITALISED = re.compile(r"(?<![.!?:;\"“(]\s)(?<!^)(?<=\s)([A-Z][a-z]{2,}(?:-[A-Z][a-z]+)*)\b")
# A language whose running text capitalises fewer of its words inside sentences than this
# writes names so and common words in lower case. Measured on the evaluation manuals'
# passages: English ones 0.03-0.11 (median per passage), German ones, which capitalise every
# noun, 0.18-0.27.
NAME_CAPITALS = 0.15
MIN_HABIT_WORDS = 200  # words of text in the question's language needed to tell its habit


def salient_terms(question: str, texts: list[str] | None = None) -> list[str]:
    """What a question names that its sources must contain to answer it: key terms (code,
    CamelCase, long acronyms) and, where its language writes only names with a capital,
    capitalised words inside its sentences. Whether it does is read from `texts` in the
    question's language (the passages found): how many of their words inside a sentence open
    in a capital. A short acronym (PDF, CSV, SQL) names a format or a field more often than
    the subject; the documents may well answer without spelling it out."""
    found = [t for t in key_terms(question) if not re.fullmatch(r"[A-Z]{3,4}", t)]
    if texts and capitalises_names_only(question, texts):
        names = [m.group(1) for m in _CAPITALISED.finditer(question)]
        found += [n for n in names if not any(n in t for t in found)]
    return list(dict.fromkeys(found))


def capitalises_names_only(question: str, texts: list[str]) -> bool:
    """Whether the question's language, as the texts in it show, capitalises few words inside
    sentences (so that a capitalised word there is a name)."""
    language = detect_language(question)
    if not language or cjk_ratio(question) > 0.1:
        return False
    inside = capitals = 0
    for text in texts:
        if detect_language(text) != language:
            continue
        for sentence in re.split(r"(?<=[.!?:;])\s+|\n\s*\n", text):
            words = re.findall(r"[^\W\d_]+", sentence)[1:]
            inside += len(words)
            capitals += sum(word[:1].isupper() for word in words)
    return inside >= MIN_HABIT_WORDS and capitals / inside < NAME_CAPITALS


def absent_key_terms(question: str, context: Asking, texts: list[str] | None = None) -> list[str]:
    """Salient terms of the question that occur nowhere in the chat's sources (as their text
    search configuration stems and folds them). A question about `devtools::install_github()`,
    MusicXML or Peru cannot be answered by sources that never say so, however similar their
    other sentences look."""
    scope = context.scope()
    return [
        term
        for term in salient_terms(question, texts)
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


def terms(text: str, language: str | None = None) -> set[str]:
    """The content words of a text, stemmed (Chinese cut into words with jieba), in
    `language` (default: the text's own; texts compared need the same, see content_terms)."""
    return set(content_terms(text, language))


_NUMBERED_HEADING = re.compile(r"^\s*\d+(?:\.\d+)*\.?\s+\S.{0,70}$")


HEADING_MAX_WORDS = 10


def _heading_like(paragraph: str, following: str) -> bool:
    """A paragraph that is a title of what follows ("Package Option: hyphens") or a line of
    its own (a date under a title): one short line opening with a capital or a digit, no
    closing punctuation, and the next paragraph opening a sentence.
    (A sentence the layout split over two paragraphs goes on in lower case.)"""
    words = paragraph.split()
    return (
        0 < len(words) <= HEADING_MAX_WORDS
        and "\n" not in paragraph.strip()
        and (paragraph.lstrip()[:1].isupper() or paragraph.lstrip()[:1].isdigit())
        and not paragraph.rstrip().endswith((".", ",", ";", ":", "!", "?"))
        and bool(re.match(r"\s*[\"“‘(\[]?[A-Z0-9\u00C0-\u024F]", following))
    )


# A word or two standing alone between whole sentences ("in", "package", "foreign") is a
# margin label or a cell the layout scattered into the text, not part of the next sentence.
_FRAGMENT_WORDS = 2
_CODE_LABEL = re.compile(r"[\\_.()=:]|[a-z][A-Z]")
_ENDED = re.compile(r"[.!?。！？]\W{0,2}$")


def _fragment(line: str, before: str, following: str) -> bool:
    """A line of at most two words in lower case or a name ("in", "write.table"), with no
    closing punctuation, between a finished sentence and one that opens with a capital or a
    bracket: layout debris."""
    words = line.split()
    return (
        0 < len(words) <= _FRAGMENT_WORDS
        and (line.lstrip()[:1].islower() or bool(_CODE_LABEL.search(line)))
        and not line.rstrip().endswith(("-", "–", ","))
        and len(line.strip()) <= MIN_SENTENCE_CHARS
        and not cjk_ratio(line)
        and not _ENDED.search(line.strip())
        and bool(_ENDED.search(before.strip()))
        and bool(re.match(r"\s*(?:[\"“‘(\[]|[A-Z0-9\u00C0-\u024F])", following))
    )


def sentences(
    text: str,
    min_chars: int = MIN_SENTENCE_CHARS,
    letters_share: float = 0.5,
    language: str | None = None,
) -> list[str]:
    """Sentences of a passage, whitespace collapsed and words cut at line ends whole again
    ("com- mands" read "commands"); headings kept apart from the sentence after them
    (numbered ones, "5.2 Changing linebreaks", and paragraphs that are titles, "Package
    Option: hyphens"); list markers and page furniture dropped. Cut by the rules of
    `language` (default: the passage's own, core.language.split_sentences)."""
    blocks: list[str] = []
    current: list[str] = []
    paragraphs = re.split(r"\n[ \t]*\n", unhyphenated(text))
    for i, paragraph in enumerate(paragraphs):
        following = paragraphs[i + 1] if i + 1 < len(paragraphs) else ""
        if _heading_like(paragraph, following):
            blocks += [" ".join(current), paragraph]
            current = []
            continue
        lines = paragraph.splitlines()
        for j, line in enumerate(lines):
            after = lines[j + 1] if j + 1 < len(lines) else following
            if _NUMBERED_HEADING.match(line) and not line.rstrip().endswith((".", ",", ";")):
                blocks += [" ".join(current), line]
                current = []
            elif _fragment(line, current[-1] if current else "", after):
                # A name in the margin ("\bibhang", "write.table") labels what follows; a
                # stray word ("in", "package") belongs to nothing.
                blocks.append(" ".join(current))
                current = [line] if _CODE_LABEL.search(line) else []
                if not current:
                    blocks.append(line)
            else:
                current.append(line)
    blocks.append(" ".join(current))
    if language is None:
        language = detect_language(text)
    out = []
    for block in (" ".join(b.split()) for b in blocks):
        for start, end in split_sentences(block, language):
            piece = block[start:end]
            letters = sum(ch.isalpha() for ch in piece)
            long_enough = min_chars <= len(piece) <= MAX_SENTENCE_CHARS
            if long_enough and letters >= len(piece) * letters_share:
                out.append(piece)
    return out


def sentence_bounds(text: str, language: str | None = None) -> list[tuple[int, int]]:
    """Where `sentences` would cut one block of text, as (start, end) offsets into it; nothing
    dropped or rejoined but the whitespace between them (an answer's sentences keep their
    place, chat.claims). In `language` (default: the text's own)."""
    return split_sentences(text, detect_language(text) if language is None else language)


@dataclass
class Evidence:
    """What the passages found for a question say about answering it."""

    missing: list[str] = field(default_factory=list)  # key terms the sources never contain
    ranked: list[Candidate] = field(default_factory=list)  # best first
    question_vector: Any = None  # the question's unit vector (None: judged by words alone)

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    @property
    def supported(self) -> bool:
        best = self.best
        if self.missing or best is None:
            return False
        return best.similarity >= ABSTAIN_SIMILARITY or best.coverage >= ABSTAIN_COVERAGE


def weigh(question: str, passages: list[dict[str, Any]], context: Asking) -> Evidence:
    """Score every sentence of `passages` (each with its citation number `n`) against the
    question; the check for names the sources lack runs first and, when it fails, nothing is
    embedded."""
    missing = absent_key_terms(question, context, [readable(p) for p in passages])
    if missing:
        return Evidence(missing=missing)
    candidates: list[Candidate] = []
    chunks: list[int | None] = []  # the chunk each candidate comes from (None: a note)
    # A sentence is read under its section's headings: "The package defines …" under
    # "url.sty version 3.4" is about url.sty, though it does not name it.
    context_terms: list[str] = []
    languages: list[str] = []
    for rank, p in enumerate(passages):
        chunk = int(p["chunk_id"]) if p.get("kind") == "document" and p.get("chunk_id") else None
        # Every sentence of a passage is read in the passage's language (its document's, or
        # for a note its own), and the question with it.
        language = str(p.get("language") or "") or language_of(readable(p))
        for position, sentence in enumerate(passage_sentences(p)):
            candidates.append(Candidate(int(p["n"]), rank, position, sentence))
            chunks.append(chunk)
            context_terms.append(str(p.get("heading") or p.get("note_title") or ""))
            languages.append(language)
    if not candidates:
        return Evidence()
    similarity = [0.0] * len(candidates)
    question_vector = None
    # Right after the server starts the model is still loading: judge by words, do not wait.
    if not warming_up():
        try:
            asked, vectors = embed_weighed(
                get_embedder(),
                question,
                [(chunk, c.text) for chunk, c in zip(chunks, candidates, strict=True)],
                timeout=settings.EMBEDDING_QUERY_TIMEOUT,
            )
            similarity = similarities(asked, vectors)
            question_vector = asked
            # A question read with the conversation before it (offline follow-ups, see
            # chat.reformulation) is as close to a sentence as either reading of it.
            conversation = getattr(context, "context_vector", None)
            if conversation is not None and len(conversation) == len(asked):
                in_context = similarities(np.asarray(conversation, dtype=np.float32), vectors)
                similarity = [max(a, b) for a, b in zip(similarity, in_context, strict=True)]
        except Exception:  # the embedder is away: sentences are judged by their words alone
            logger.warning("could not embed the sentences of an answer; judging by words only")
    wanted_by_language: dict[str, set[str]] = {}
    held = []
    for c, heading, language in zip(candidates, context_terms, languages, strict=True):
        # The question's words are stemmed as the passage's language is, so that both sides
        # of the comparison read words the same way.
        if language not in wanted_by_language:
            wanted_by_language[language] = _terms(question, language)
        held.append(_terms(c.text, language) | _terms(heading, language))
    # A follow-up's words are read with the turn before it (its question and what its answer
    # backed): a sentence holding those words covers the question as the conversation asks it.
    around_text = str(getattr(context, "context_text", "") or "")
    around: dict[str, set[str]] = {}
    for c, sim, said, language in zip(candidates, similarity, held, languages, strict=True):
        wanted = wanted_by_language[language]
        c.similarity = sim
        c.coverage = len(wanted & said) / len(wanted) if wanted else 0.0
        if around_text:
            if language not in around:
                around[language] = wanted | _terms(around_text, language)
            widened = around[language]
            if widened:
                c.coverage = max(c.coverage, len(widened & said) / len(widened))
    return Evidence(
        ranked=sorted(candidates, key=lambda c: -c.score), question_vector=question_vector
    )


def coverage(question: str, text: str, language: str = "") -> float:
    """The share of the question's content words that `text` holds (both read as `language`
    reads words)."""
    wanted = _terms(question, language)
    return len(wanted & _terms(text, language)) / len(wanted) if wanted else 0.0


def _terms(text: str, language: str) -> set[str]:
    return terms(text, language or None)


def readable(passage: dict[str, Any]) -> str:
    """A passage's text as a reader sees it: a note's Markdown as plain text."""
    text = str(passage.get("text", ""))
    if passage.get("kind") != "note":
        return text
    title = str(passage.get("note_title", ""))
    if title and text.startswith(title + "\n"):  # the title is a line of its own
        text = f"{title}\n\n{text[len(title) + 1 :]}"
    return plain_text(text)


def passage_sentences(passage: dict[str, Any], *, every: bool = False) -> list[str]:
    """The sentences of a passage; a note's plain text line by line (its headings and list
    items are lines of their own, not run into the sentence after them). `every`: short ones
    and those mostly of digits too (what an answer may cite, chat.claims)."""
    limits = (1, 0.0) if every else (MIN_SENTENCE_CHARS, 0.5)
    if passage.get("kind") == "note":
        # A note has no page furniture: every line of its text counts, however short; its
        # title is the heading its sentences are read under (`weigh`), not one of them.
        lines = readable(passage).splitlines()
        if lines and lines[0] == passage.get("note_title"):
            lines = lines[1:]
        return [s for line in lines for s in sentences(line, 1, limits[1])]
    return sentences(readable(passage), *limits)


def backing_sentence(claim: str, source_text: str) -> str | None:
    """The sentence of a source that shares the most content words with `claim` (an answer's
    sentence citing that source), if it shares at least BACKING_COVERAGE of them. Both are
    read in the source's language: stemmed alike, or their words never meet."""
    language = language_of(source_text)
    wanted = terms(claim, language)
    if not wanted:
        return None
    best, best_share = None, 0.0
    for sentence in sentences(source_text, language=language):
        share = len(wanted & terms(sentence, language)) / len(wanted)
        if share > best_share:
            best, best_share = sentence, share
    return best if best_share >= BACKING_COVERAGE else None


def back_claims(answer: str, sources: list[dict[str, Any]], quotes: dict[int, list[str]]) -> None:
    """For each [n] the answer uses without a quote (phase 2 failed or skipped it), the
    sentence of source n that backs the claim before the marker (the text since the previous
    marker or paragraph), if one shares enough words with it. The agent still verifies it."""
    start = 0
    for match in MARKER.finditer(answer):
        claim = answer[max(start, answer.rfind("\n\n", 0, match.start()) + 1) : match.start()]
        start = match.end()
        n = int(match.group(1))
        if quotes.get(n) or not 1 <= n <= len(sources):
            continue
        sentence = backing_sentence(claim[-600:], str(sources[n - 1].get("text", "")))
        if sentence:
            quotes[n] = [sentence]
