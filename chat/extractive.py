"""The offline answerer: no language model, one passage of the sources.

It runs `document_search` (and, in a notebook chat, `note_search`) through the same tool
registry as the chat model and weighs every sentence of the passages found against the
question, by meaning (embedding similarity) and by words (grounding.evidence.weigh). The best
sentence is then grown to the unit of its page that holds it (chat.passages: its paragraph,
list or code example, with a lead-in that ends in a colon and what such a lead-in
introduces), and that one contiguous passage is the answer, shown with its structure, the
sentences that answer highlighted (they are the citation's verified quote). Nothing is
stitched together from different passages: the only words not from the sources are a short,
translated frame ("From R-data.pdf, page 14:"). Up to three further passages follow as *Also
in your sources* (file, page, a line of preview). When the evidence is weak it says once that
the sources do not answer, and lists the closest passages as closest matches.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
from django.conf import settings
from django.utils.translation import gettext as _

from chat.events import Event, Finished, Token
from chat.passages import Unit, escape, grow, real_heading, render
from chat.tools import AnswerRequest, search_first
from core.embeddings import get_embedder
from core.textutil import clip
from grounding.evidence import (
    ABSTAIN_COVERAGE,
    ABSTAIN_SIMILARITY,
    Candidate,
    Evidence,
    coverage,
    weigh,
)
from grounding.sentence_vectors import similarities
from search.boilerplate import boilerplate_chunks

__all__ = ["ExtractiveAnswerer", "abstention", "words"]
logger = logging.getLogger(__name__)

RELATED = 3  # further passages listed under the answer
CANDIDATE_UNITS = 8  # units weighed as a whole, around the best sentences
UNIT_FLOOR = 0.7  # ... that score at least this share of the best one
UNIT_EMBED_CHARS = 1000
# What a unit scores: this share is how close the whole unit is to the question (meaning and
# words), the rest its best sentence's score.
UNIT_WEIGHT = 0.5
PREVIEW_CHARS = 160
FOLLOW_UPS = 2


def abstention(evidence: Evidence, searched: list[str] | None = None) -> str:
    """What an answer says when the sources do not carry the answer (Markdown, escaped), in
    the active language, and, given the searches' summaries, what was searched."""
    text = _("Your sources don't seem to answer this.")
    if evidence.missing:
        text = _("Your sources never mention “%(term)s”, so they can't answer this.") % {
            "term": evidence.missing[0]
        }
    text = escape(text)
    if searched:  # the tools' own summaries, in English like every tool call's
        done = ", ".join(s.replace("Searching", "searched", 1) for s in searched)
        text += f"\n\n*{escape(f'I {done}.')}*"
    return text


def words(text: str) -> Iterator[Token]:
    """Text that is already whole as tokens a paragraph at a time: the page shows it block by
    block. Every token is one event through the channel layer to every open page; a word at a
    time made ~100 of them per answer, which under 20 answers at once cost more than the
    answers."""
    for piece in re.findall(r"[^\n]+\n*|\n+", text):
        yield Token(piece)


class ExtractiveAnswerer:
    name = "extractive"

    def __init__(self, notice: str = "") -> None:
        self.notice = notice  # set when it stands in for an unavailable chat model

    def run(
        self, question: str, history: list[tuple[str, str]], context: AnswerRequest
    ) -> Iterator[Event]:
        results = yield from search_first(question, context)
        passages = [p for result in results for p in result.passages]
        evidence = weigh(question, passages, context)
        # Licence, copyright, contents and index text answers only when nothing else does.
        aside = boilerplate_chunks(int(p["chunk_id"]) for p in passages if p.get("chunk_id"))
        apart = {int(p["n"]) for p in passages if p.get("chunk_id") in aside}
        unit = None
        if evidence.supported:
            unit = _best_unit(question, evidence, passages, apart) or _best_unit(
                question, evidence, passages
            )
        if unit is None:
            yield from words(abstention(evidence))
            yield Finished(
                confidence="low",
                abstained=True,
                related=_related(evidence, passages, None, strong=False, apart=apart),
            )
            return
        frame = escape(_frame(unit.passage, unit.last_page))
        yield from words(f"{frame} [{unit.n}]\n\n{render(unit)}")
        related = _related(evidence, passages, unit, strong=True, apart=apart)
        yield Finished(
            confidence=_confidence(evidence.best),
            follow_ups=_follow_ups(question, unit, related),
            abstained=False,
            quotes={unit.n: [unit.quote]},
            related=related,
        )


def _best_unit(
    question: str,
    evidence: Evidence,
    passages: list[dict[str, Any]],
    apart: set[int] | frozenset[int] = frozenset(),
) -> Unit | None:
    """Of the units that hold the best few sentences (each from another place), the one that
    answers best as a whole: its best sentence's score, and the whole unit's closeness to
    the question in meaning and in words (the answer is often the sentence after the one that
    restates the question, or the code a lead-in introduces). Passages numbered in `apart`
    are left out."""
    units: list[tuple[Candidate, Unit]] = []
    for candidate in evidence.ranked:
        if len(units) == CANDIDATE_UNITS or candidate.score < evidence.ranked[0].score * UNIT_FLOOR:
            break
        if candidate.n in apart or any(candidate.text in unit.text for _, unit in units):
            continue
        unit = grow(candidate, evidence, passages)
        if unit is not None:
            units.append((candidate, unit))
    if not units:
        return None
    similarity = [0.0] * len(units)
    if evidence.question_vector is not None and len(units) > 1:
        try:
            vectors = get_embedder().embed(
                [u.text[:UNIT_EMBED_CHARS] for _, u in units],
                timeout=settings.EMBEDDING_QUERY_TIMEOUT,
            )
            matrix = np.asarray(vectors, dtype=np.float32)
            similarity = similarities(evidence.question_vector, matrix)
        except Exception:  # the embedder is away: by the sentences and the words
            logger.warning("could not embed the passages of an answer; weighing their sentences")

    def score(i: int) -> float:
        candidate, unit = units[i]
        language = str(unit.passage.get("language") or "")
        heading = str(unit.passage.get("heading") or "")
        words = coverage(question, f"{heading} {unit.text}", language)
        whole = 0.6 * similarity[i] + 0.4 * words
        return (1 - UNIT_WEIGHT) * candidate.score + UNIT_WEIGHT * whole

    return units[max(range(len(units)), key=score)][1]


def _frame(passage: dict[str, Any], last_page: int | None = None) -> str:
    """The only words of the answer that are not the source's: where the passage is from
    (`last_page`: the page it goes on to)."""
    if passage.get("kind") == "note":
        return _("From your note “%(title)s”:") % {"title": passage.get("note_title", "")}
    if passage.get("where"):  # a section, slide, sheet range or time of a non-PDF source
        return _("From %(file)s, %(where)s:") % {
            "file": passage.get("file", ""),
            "where": passage.get("where", ""),
        }
    if last_page:
        return _("From %(file)s, pages %(first)s–%(last)s:") % {
            "file": passage.get("file", ""),
            "first": passage.get("page", ""),
            "last": last_page,
        }
    return _("From %(file)s, page %(page)s:") % {
        "file": passage.get("file", ""),
        "page": passage.get("page", ""),
    }


def _confidence(best: Candidate | None) -> str:
    if best is None:
        return "low"
    if best.similarity >= 0.6 and best.coverage >= 0.6:
        return "high"
    if best.similarity >= 0.45 or best.coverage >= 0.6:
        return "medium"
    return "low"


def _related(
    evidence: Evidence,
    passages: list[dict[str, Any]],
    unit: Unit | None,
    *,
    strong: bool,
    apart: set[int],
) -> list[dict[str, Any]]:
    """Further passages, one per place (file and page, or note), best first: beside an
    answer those whose best sentence is itself evidence (`strong`), beside an abstention the
    closest ones. The answer's own place and what it quotes are left out."""
    by_n = {int(p["n"]): p for p in passages}
    seen: set[tuple[Any, ...]] = set()
    said: set[str] = set()  # what is listed already: a copy of a document says nothing new
    if unit is not None:
        seen.add(_place(unit.passage))
    out: list[dict[str, Any]] = []
    for candidate in evidence.ranked:
        if len(out) == RELATED:
            break
        passage = by_n.get(candidate.n)
        if passage is None or _place(passage) in seen or candidate.n in apart:
            continue
        if unit is not None and candidate.text in unit.text:
            continue
        if candidate.text in said:
            continue
        good = candidate.similarity >= ABSTAIN_SIMILARITY or candidate.coverage >= ABSTAIN_COVERAGE
        if strong and not good:
            continue
        seen.add(_place(passage))
        said.add(candidate.text)
        keys = (
            "kind",
            "file",
            "page",
            "where",
            "attachment_id",
            "chunk_id",
            "note_id",
            "note_title",
        )
        entry = {key: passage[key] for key in keys if key in passage}
        entry["heading"] = str(passage.get("heading") or "").split(" › ")[-1].strip()
        entry.update(quote=candidate.text, preview=clip(candidate.text, PREVIEW_CHARS))
        out.append(entry)
    return out


def _place(passage: dict[str, Any]) -> tuple[Any, ...]:
    if passage.get("kind") == "note":
        return ("note", passage.get("note_id"))
    return ("document", passage.get("attachment_id"), passage.get("page"))


_NUMBERING = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|[A-Z]\.|[IVX]+\.)\s+")


def _follow_ups(question: str, unit: Unit, related: list[dict[str, Any]]) -> list[str]:
    """Questions the sources answer next: the sections of the further passages (each found
    by this search with evidence of its own), real headings only (no dot leaders, no page
    numbers), not the section the answer comes from nor one the question already names."""
    own = str(unit.passage.get("heading") or "").split(" › ")[-1].strip()
    asked = question.casefold()
    out: list[str] = []
    for entry in related:
        heading = _NUMBERING.sub("", entry.get("heading", "")).strip()
        if not heading or heading == own or heading.casefold() in asked:
            continue
        if not real_heading(heading) or heading in out:
            continue
        out.append(heading)
        if len(out) == FOLLOW_UPS:
            break
    return [_("What does the section “%(section)s” say?") % {"section": h} for h in out]
