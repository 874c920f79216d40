"""What each Studio output says, built from the sources themselves: quoted sentences, the
documents' own structure, the passages the chat's answerer finds. Nothing here writes text
of its own beyond headings the sources give and a few translated labels.

Every statement cites the passage it quotes by [n]; `Citations.finish` checks every quote on
its page (grounding.citations.verify, as chat answers are checked) and leaves out whatever
statement a check refuses, so no statement is shown as fact without its quote on the page.

With a chat model, studio.services.drafting then writes the briefing, the concepts and the
events from those quotes (each sentence checked against the quotes it cites) and groups the
mind map's key topics into themes.

The methods are general, not fitted to one language or one set of documents: central
sentences by embedding centrality with maximal marginal relevance (guides.services.content),
key phrases by KeyBERT's method (guides.services.phrases), definitions as the sentences that
name a phrase and are closest in meaning to the question what it means, dates found and
parsed by dateparser (many languages), quiz questions as cloze deletions of a definition
with the other key phrases as distractors.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
from django.conf import settings
from django.utils.translation import gettext as _

from attachments.models import DocumentChunk, NoteAttachment
from chat.agent import answer_once, get_answerer
from chat.events import AnswerError
from chat.extractive import ExtractiveAnswerer
from chat.selection import SourceSet
from core import model_budget
from core.embeddings import get_embedder
from core.textutil import clip
from grounding.citations import MARKER, verify
from grounding.evidence import sentences
from guides.services import content
from guides.services.content import Passage, Question, Sentence
from guides.services.phrases import key_phrases, matrix
from search.boilerplate import boilerplate_chunks
from search.retrieval import Scope, search
from studio.services import drafting

if TYPE_CHECKING:
    from core.types import User
    from notes.models import Notebook

Beat = Callable[[str, int], None]  # (stage, percent done)

SUMMARY_SENTENCES = 4
KEY_POINTS = 18  # sentences of the briefing's key points, over its sections
CONCEPTS = 10
MAX_CONCEPT_SEARCHES = 20
QUESTIONS = 8  # of an FAQ; a study guide asks fewer
REVIEW_QUESTIONS = 5
CARDS = 16
QUIZ = 10
OPTIONS = 4
EVENTS = 40
MAX_DATED = 1500  # sentences with a year handed to dateparser
MAX_TIMELINE_CHUNKS = 6000
MAP_CHILDREN = 12  # of one node of the mind map
_YEAR = re.compile(r"(?<!\d)(1[0-9]{3}|20[0-9]{2}|21[0-9]{2})(?!\d)")
BLANK = "_____"


@dataclass
class Material:
    """What an output is written from: who asks, in which notebook, which ready documents
    and which notes (None: all of the notebook's)."""

    user: User
    notebook: Notebook
    files: list[NoteAttachment]
    note_ids: list[int] | None = None
    scoped: bool = False  # the user chose sources (else the whole notebook)
    answered_by: set[str] = field(default_factory=set)  # "llm", "extractive": who answered

    @property
    def scope(self) -> Scope:
        return Scope(
            notebook_id=self.notebook.pk,
            attachment_ids=[a.pk for a in self.files] if self.scoped else None,
            note_ids=self.note_ids if self.scoped else None,
        )

    @property
    def selection(self) -> SourceSet | None:
        if not self.scoped:
            return None
        return SourceSet(attachments={a.pk for a in self.files}, notes=set(self.note_ids or []))

    @property
    def title(self) -> str:
        if len(self.files) == 1:
            return content.title_of(self.files[0], content.outline(self.files, levels=1))
        return self.notebook.title


@dataclass
class Citations:
    """An output's citations: one number per quoted sentence, in order of first use."""

    sources: list[dict[str, Any]] = field(default_factory=list)
    quotes: dict[int, list[str]] = field(default_factory=dict)
    _known: dict[tuple[Any, ...], int] = field(default_factory=dict)

    def cite(self, source: dict[str, Any], quote: str) -> int:
        kind = source.get("kind", "document")
        where = source.get("note_id") if kind == "note" else source.get("attachment_id")
        key = (kind, where, source.get("page"), " ".join(quote.split()))
        if key not in self._known:
            keep = ("kind", "attachment_id", "file", "page", "where", "chunk_id", "note_id",
                    "note_title")  # fmt: skip
            self.sources.append({k: source[k] for k in keep if source.get(k) not in (None, "")})
            self.sources[-1].setdefault("kind", "document")
            self._known[key] = len(self.sources)
            self.quotes[len(self.sources)] = [quote]
        return self._known[key]

    def sentence(self, s: Sentence) -> str:
        """A quoted sentence with its marker: the statement of most outputs."""
        return f"{s.text} [{self.cite(_of(s.passage), s.text)}]"

    def adopt(self, text: str, citations: list[dict[str, Any]]) -> str:
        """An answer's text (its own numbering) renumbered into this output's."""
        own = {int(c["n"]): self.cite(c, str(c.get("quote", ""))) for c in citations}

        def swap(match: re.Match[str]) -> str:
            n = own.get(int(match.group(1)))
            return f"[{n}]" if n else ""

        return MARKER.sub(swap, text)

    def finish(self, sections: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        """The output's content: every item whose markers all name a quote found on its page
        (grounding.citations.verify), the citations renumbered in the order they are used, and
        sections left empty by refusals dropped."""
        texts = [t for s in sections for item in s["items"] for t in _all_texts(item)]
        found, _refused = verify("\n".join(texts), self.sources, self.quotes)
        good = {int(c["n"]) for c in found}
        by_n = {int(c["n"]): c for c in found}
        order: dict[int, int] = {}
        kept_sections = []
        for section in sections:
            items = []
            for item in section["items"]:
                pruned = _pruned(item, good)
                if pruned is None:
                    continue  # a statement that cites nothing, or a refused quote, is left out
                item = pruned
                used = [int(n) for t in _all_texts(item) for n in MARKER.findall(t)]
                for n in used:
                    order.setdefault(n, len(order) + 1)
                items.append(_renumbered(item, order))
            if items or section.get("keep"):
                kept_sections.append({**section, "items": items})
        citations = [
            {**by_n[old], "n": new} for old, new in sorted(order.items(), key=lambda x: x[1])
        ]
        return {"sections": kept_sections, "citations": citations, **extra}


_TEXT_KEYS = ("text", "back", "answer", "question")


def _texts(item: dict[str, Any]) -> list[str]:
    """The texts of an item that may cite (a mind map node's own, not its children's)."""
    return [str(item[k]) for k in _TEXT_KEYS if isinstance(item.get(k), str)]


def _all_texts(item: dict[str, Any]) -> list[str]:
    return _texts(item) + [t for c in item.get("children") or [] for t in _all_texts(c)]


def _pruned(node: dict[str, Any], good: set[int]) -> dict[str, Any] | None:
    """A mind map node without the children whose citation was refused (None: itself)."""
    used = [int(n) for t in _texts(node) for n in MARKER.findall(t)]
    if any(n not in good for n in used) or (not used and node.get("cited", True)):
        return None
    children = [c for c in (_pruned(c, good) for c in node.get("children") or []) if c]
    return {**node, "children": children} if "children" in node else node


def _renumbered(item: dict[str, Any], order: dict[int, int]) -> dict[str, Any]:
    def swap(match: re.Match[str]) -> str:
        return f"[{order[int(match.group(1))]}]"

    out = dict(item)
    for key in _TEXT_KEYS:
        if isinstance(out.get(key), str):
            out[key] = MARKER.sub(swap, out[key])
    if isinstance(out.get("children"), list):  # a mind map node
        out["children"] = [_renumbered(c, order) for c in out["children"]]
    return out


def _writing(beat: Beat, percent: int) -> None:
    """The stage while the chat model writes (studio.services.drafting), when there is one."""
    if settings.CHAT_MODEL:
        beat("writing", percent)


def _numbered(items: list[dict[str, Any]]) -> dict[int, str]:
    """The statements of items not yet finished, by their numbers."""
    return drafting.statements({"sections": [{"items": items}]})


def _of(p: Passage) -> dict[str, Any]:
    return {"kind": "document", "attachment_id": p.attachment_id, "file": p.file,
            "page": p.page, "chunk_id": p.chunk_id}  # fmt: skip


def _heading(p: Passage) -> str:
    """The deepest real heading above a passage, else ""."""
    for heading in reversed(p.heading_path):
        cleaned = content.clean_heading(heading)
        if content.real_heading(cleaned):
            return cleaned
    return ""


# --- Shared analysis -----------------------------------------------------------------------


@dataclass
class Analysis:
    passages: list[Passage]  # the most central, spread over the files
    pool: list[Passage]  # more of them: where phrases and key points are looked for
    found: content.Vectors | None
    outline: list[dict[str, Any]]
    phrases: list[str]


def analyse(material: Material, beat: Beat, *, phrases: int = CONCEPTS) -> Analysis:
    files = material.files
    ids = [a.pk for a in files]
    limit = max(8, content.MAX_OUTLINE // max(1, len(files)))
    outline = content.outline(files, levels=2, limit=limit)
    chosen, pool, found = content.central_passages(ids, k=max(10, 2 * len(files)))
    beat("passages", 20)
    found_phrases: list[str] = []
    if found is not None and pool:
        found_phrases = key_phrases(
            [p.text for p in pool], found.centre, exclude=[material.title], k=phrases
        )
    beat("phrases", 35)
    return Analysis(chosen, pool, found, outline, found_phrases)


def summary_sentences(material: Material, analysis: Analysis) -> list[Sentence]:
    """A single file's own introduction (content.lead); for several files a sentence per file
    in its own words, as a notebook guide says it (content.notebook_summary); else the most
    central sentences."""
    if len(material.files) == 1:
        lead = content.lead(material.files[0], analysis.found, SUMMARY_SENTENCES)
        if lead:
            return lead
    else:
        each = content.notebook_summary(list(material.files), analysis.passages)
        if each:
            return [sentence for sentence, _ in each]
    return content.central_sentences(analysis.passages, SUMMARY_SENTENCES)


def definition(user: User, phrase: str, scope: Scope) -> Sentence | None:
    """The sentence that says what `phrase` means: among the passages the search for "What is
    meant by “phrase”?" finds (not boilerplate), the whole sentence naming the phrase that is
    closest to that question in meaning, if it is close enough (content.DEFINES)."""
    question = Question("definition", phrase)
    found = search(user=user, query=question.text, scope=scope, limit=5, rerank=False)
    chunks = [hit.chunk for hit in found.hits if hit.chunk is not None]
    flagged = boilerplate_chunks(c.pk for c in chunks)
    named: list[Sentence] = []
    for chunk in chunks:
        if chunk.pk in flagged:
            continue
        passage = Passage(chunk.pk, chunk.attachment_id, chunk.attachment.original_name,
                          chunk.page_number, chunk.content, list(chunk.heading_path))  # fmt: skip
        named += [Sentence(s, passage, i) for i, s in enumerate(sentences(chunk.content))
                  if content.good_sentence(s) and phrase.casefold() in s.casefold()]  # fmt: skip
    if not named:
        return None
    rows = matrix(get_embedder().embed([question.text, *(s.text for s in named)]))
    closeness = rows[1:] @ rows[0]
    best = int(np.argmax(closeness))
    return named[best] if closeness[best] >= content.DEFINES else None


def concepts(material: Material, analysis: Analysis) -> list[str]:
    """What a study guide defines: the sections' own names (their headings without numbers,
    the document's title left out) and the key phrases, in turn, no two alike."""
    title = material.title.casefold()
    headings = [content.unnumbered(e["text"]) for e in analysis.outline]
    named = [h for h in headings if h and h.casefold() != title]
    out: dict[str, str] = {}
    for i in range(max(len(named), len(analysis.phrases))):
        for phrase in named[i : i + 1] + analysis.phrases[i : i + 1]:
            out.setdefault(phrase.casefold(), phrase)
    return list(out.values())[:MAX_CONCEPT_SEARCHES]


def definitions(
    material: Material, analysis: Analysis, beat: Beat, start: int, end: int
) -> list[tuple[str, Sentence]]:
    """Up to CONCEPTS concepts with the sentence that defines each (`definition`), no sentence
    twice."""
    out: list[tuple[str, Sentence]] = []
    asked = concepts(material, analysis)
    for i, phrase in enumerate(asked):
        if len(out) >= CONCEPTS:
            break
        found = definition(material.user, phrase, material.scope)
        if found is not None and all(found.text != s.text for _p, s in out):
            out.append((phrase, found))
        beat("definitions", start + (end - start) * (i + 1) // max(1, len(asked)))
    return out


def candidate_questions(material: Material, analysis: Analysis) -> list[Question]:
    """The questions a guide would suggest: a section's, then a key phrase's, in turn."""
    sections = content.section_questions(analysis.outline, material.title, analysis.found)
    defined = [Question("definition", phrase) for phrase in analysis.phrases]
    out: list[Question] = []
    for i in range(max(len(sections), len(defined))):
        out += [q for q in (sections[i : i + 1] + defined[i : i + 1])]
    return out


@dataclass
class Answered:
    question: str  # as shown, in the output's language
    text: str  # the answer's Markdown, in this output's numbering
    quote: str  # its first verified quote (a flashcard's back)
    source: dict[str, Any]


def answered_questions(
    material: Material, analysis: Analysis, cites: Citations, limit: int, beat: Beat,
    start: int, end: int,
) -> list[Answered]:  # fmt: skip
    """Up to `limit` of the candidate questions that retrieval answers (content.
    verified_questions), each answered as the chat answers it (chat.agent.answer_once: the
    offline answerer's one passage, or the chat model's checked sentences) and kept when the
    answer cites a verified quote and does not abstain."""
    asked = content.verified_questions(
        material.user, candidate_questions(material, analysis), material.scope, limit=limit
    )
    out: list[Answered] = []
    for i, question in enumerate(asked):
        shown = content.shown(question)
        # With a chat model, each answer is a model call on the asker's budget; once it is
        # spent the offline answerer answers (core.model_budget).
        answerer = None
        if settings.CHAT_MODEL and not model_budget.spend(
            user_id=material.user.pk, feature="studio"
        ):
            answerer = ExtractiveAnswerer()
        try:
            checked, _finished = answer_once(
                user=material.user, notebook=material.notebook, question=question["text"],
                selection=material.selection, answerer=answerer,
            )  # fmt: skip
        except AnswerError:
            continue
        if checked.grounding != "cited" or not checked.citations:
            continue
        material.answered_by.add(answerer.name if answerer else get_answerer().name)
        first = checked.citations[0]
        out.append(
            Answered(
                shown,
                cites.adopt(_backed_only(checked.content, checked.unbacked), checked.citations),
                str(first.get("quote", "")),
                first,
            )
        )
        beat("answers", start + (end - start) * (i + 1) // max(1, len(asked)))
    return out


def _backed_only(text: str, unbacked: list[dict[str, Any]]) -> str:
    """A chat model's answer without the sentences no passage backs (chat.claims found them;
    the chat shows them flagged, Studio leaves them out)."""
    out, pos = [], 0
    for span in sorted(unbacked, key=lambda s: int(s["start"])):
        start, end = int(span["start"]), int(span["end"])
        if start >= pos:
            out.append(text[pos:start])
            pos = end
    out.append(text[pos:])
    return re.sub(r"[ \t]+\n", "\n", "".join(out)).strip()


# --- The outputs ---------------------------------------------------------------------------


def briefing(material: Material, beat: Beat) -> dict[str, Any]:
    """The quoted briefing (`quoted_briefing`), written by the chat model when there is one
    (studio.services.drafting.briefing: every sentence checked against the quotes it cites)."""
    told = quoted_briefing(material, beat)
    _writing(beat, 92)
    written = drafting.briefing(told, material.user)
    if written is None:
        return told
    material.answered_by.add("llm")
    return _again(told, written)


def _again(told: dict[str, Any], sections: list[dict[str, Any]]) -> dict[str, Any]:
    """`sections`, in the numbering of the finished output `told`, finished again."""
    cites = Citations()
    for citation in told["citations"]:
        cites.cite(citation, str(citation.get("quote", "")))
    return cites.finish(sections)


def quoted_briefing(material: Material, beat: Beat) -> dict[str, Any]:
    """A summary (the source's own introduction, else its central sentences), then key points
    by section: the central sentences of the central passages, grouped under the heading of
    the section they stand in, sections in reading order."""
    analysis = analyse(material, beat)
    cites = Citations()
    summary = summary_sentences(material, analysis)
    said = {s.text for s in summary}
    sections: list[dict[str, Any]] = [
        {"heading": _("Summary"), "summary": True,
         "items": [{"text": cites.sentence(s)} for s in summary]}
    ]  # fmt: skip
    beat("summary", 55)
    picked = [s for s in content.central_sentences(analysis.pool, KEY_POINTS) if s.text not in said]
    groups: dict[tuple[int, str], list[Sentence]] = {}
    for s in picked:
        groups.setdefault(
            (s.passage.attachment_id, _heading(s.passage) or s.passage.file), []
        ).append(s)
    for (_file, heading), found in groups.items():
        sections.append({"heading": heading, "items": [{"text": cites.sentence(s)} for s in found]})
    if analysis.phrases:
        topics = [{"text": p, "cited": False} for p in analysis.phrases]
        sections.append({"heading": _("Key topics"), "items": topics})
    beat("key points", 90)
    return cites.finish(sections)


def study_guide(material: Material, beat: Beat) -> dict[str, Any]:
    """Key concepts with the sentences that define them, then review questions with the
    answers the chat gives them."""
    analysis = analyse(material, beat)
    cites = Citations()
    found = definitions(material, analysis, beat, 35, 60)
    concepts = [{"term": phrase, "text": cites.sentence(s)} for phrase, s in found]
    _writing(beat, 60)
    explained = drafting.concepts(concepts, _numbered(concepts), material.user)
    if explained is not None:
        concepts = explained
        material.answered_by.add("llm")
    answered = answered_questions(material, analysis, cites, REVIEW_QUESTIONS, beat, 60, 95)
    sections = [
        {"heading": _("Key concepts"), "items": concepts},
        {"heading": _("Review questions"),
         "items": [{"question": a.question, "text": a.text, "markdown": True} for a in answered]},
    ]  # fmt: skip
    return cites.finish(sections)


def faq(material: Material, beat: Beat) -> dict[str, Any]:
    """The questions the sources answer (those a guide suggests and retrieval can answer),
    each with the answer the chat gives it."""
    analysis = analyse(material, beat)
    cites = Citations()
    answered = answered_questions(material, analysis, cites, QUESTIONS, beat, 40, 95)
    items = [{"question": a.question, "text": a.text, "markdown": True} for a in answered]
    return cites.finish([{"heading": _("Questions and answers"), "items": items}])


@dataclass(order=True)
class Event:
    when: date
    precision: str = field(compare=False)  # year | month | day
    sentence: Sentence = field(compare=False)


# Two moments a date without a month or a day is completed from: what differs between the two
# readings of a date was not in the text.
_BASES = (datetime(2000, 6, 15), datetime(2001, 11, 28))


def _read(text: str, languages: list[str] | None) -> tuple[datetime, datetime] | None:
    # dateparser loads its language data (about a second): only when a timeline is written.
    from dateparser import parse

    readings = []
    for base in _BASES:
        options = {"RELATIVE_BASE": base, "PREFER_DAY_OF_MONTH": "current",
                    "RETURN_AS_TIMEZONE_AWARE": False, "REQUIRE_PARTS": ["year"]}  # fmt: skip
        try:
            found = parse(text, languages=languages, settings=options)
        except Exception:  # dateparser refuses some languages and odd input: no date then
            return None
        if found is None:
            return None
        readings.append(found)
    return readings[0], readings[1]


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")  # fmt: skip


@cache
def _month_names(language: str) -> frozenset[str]:
    """The month names dateparser knows in this language (its locale data), folded."""
    # dateparser's data loads only for a timeline (see _read).
    from dateparser.languages.loader import default_loader

    try:
        info = default_loader.get_locale(language).info
    except Exception:  # a language dateparser does not know
        return frozenset()
    return frozenset(str(n).casefold().rstrip(".") for m in _MONTHS for n in info.get(m, []))


def _names_month(span: str, language: str) -> bool:
    """Whether the words say a month: a month name of the language, or digits besides the
    year (03/1921, 1921-03-03)."""
    if re.search(r"\d", _YEAR.sub("", span, count=1)):
        return True
    names = _month_names(language) if language else frozenset()
    return any(w.casefold().strip(".,;:()") in names for w in span.split())


def _dated(text: str, language: str) -> tuple[date, str] | None:
    """The first date dateparser finds in a sentence that names a year (a bare number like
    "2.3" or a page reference is no date), and how precise it is: the longest run of words
    around the year that dateparser reads, read twice, completed from two moments (_BASES);
    what differs between the readings was not in the text. A month needs its name or its
    number in the words (dateparser reads "In 1953 a" as January)."""
    # dateparser's data loads only for a timeline (see _read).
    from dateparser.search import search_dates

    languages = [language] if language else None
    options = {"RETURN_AS_TIMEZONE_AWARE": False, "REQUIRE_PARTS": ["year"]}
    try:
        found = search_dates(text, languages=languages, settings=options) or []
    except Exception:  # see _read
        return None
    for said, _when in found:
        words = said.split()
        at = next((i for i, w in enumerate(words) if _YEAR.search(w)), None)
        if at is None:
            continue
        spans = sorted(((lo, hi) for lo in range(at + 1) for hi in range(at + 1, len(words) + 1)),
                       key=lambda span: span[0] - span[1])  # fmt: skip
        for lo, hi in spans:
            span = " ".join(words[lo:hi])
            readings = _read(span, languages)
            if readings is None or readings[0].year != readings[1].year:
                continue
            a, b = readings
            precision = "year" if a.month != b.month else "month" if a.day != b.day else "day"
            if precision != "year" and not _names_month(span, language):
                precision = "year"
            month = 1 if precision == "year" else a.month
            when = date(a.year, month, a.day if precision == "day" else 1)
            return (when, precision) if 1000 <= when.year <= 2199 else None
    return None


def timeline(material: Material, beat: Beat) -> dict[str, Any]:
    """Dated events in order: the sentences of the sources that name a date (with a year),
    the date parsed by dateparser in the document's language; boilerplate (copyright years)
    left out; one event per sentence, at most EVENTS spread over the whole time span."""
    cites = Citations()
    chunks = list(
        DocumentChunk.objects.filter(attachment__in=material.files)
        .select_related("attachment")
        .order_by("attachment_id", "index")[:MAX_TIMELINE_CHUNKS]
    )
    flagged = boilerplate_chunks(c.pk for c in chunks if _YEAR.search(c.content))
    beat("reading", 20)
    candidates: list[Sentence] = []
    for chunk in chunks:
        if chunk.pk in flagged or not _YEAR.search(chunk.content):
            continue
        passage = Passage(chunk.pk, chunk.attachment_id, chunk.attachment.original_name,
                          chunk.page_number, chunk.content, list(chunk.heading_path))  # fmt: skip
        candidates += [Sentence(s, passage, i) for i, s in enumerate(sentences(chunk.content))
                       if _YEAR.search(s) and content.good_sentence(s)]  # fmt: skip
        if len(candidates) >= MAX_DATED:
            break
    languages = {a.pk: a.language for a in material.files}
    events: list[Event] = []
    seen: set[str] = set()
    for i, s in enumerate(candidates):
        if s.text in seen:
            continue
        seen.add(s.text)
        dated = _dated(s.text, languages.get(s.passage.attachment_id, ""))
        if dated is not None:
            events.append(Event(dated[0], dated[1], s))
        if i % 50 == 0:
            beat("dates", 20 + 70 * i // max(1, len(candidates)))
    events.sort()
    if len(events) > EVENTS:  # spread over the span: every k-th
        step = len(events) / EVENTS
        events = [events[int(i * step)] for i in range(EVENTS)]
    items = [{"date": e.when.isoformat(), "precision": e.precision,
              "text": cites.sentence(e.sentence)} for e in events]  # fmt: skip
    _writing(beat, 92)
    said = drafting.events(items, _numbered(items), material.user)
    if said is not None:
        items = said
        material.answered_by.add("llm")
    return cites.finish([{"heading": _("Timeline"), "items": items}])


def mind_map(material: Material, beat: Beat) -> dict[str, Any]:
    """The sources' topics as a tree: each file, its sections (the heading outline, two
    levels) and its key phrases; each node cites the place it stands for (a heading is quoted
    where it heads), so a click opens the source there."""
    analysis = analyse(material, beat)
    cites = Citations()
    by_file: dict[int, list[dict[str, Any]]] = {}
    for entry in _without_boilerplate(analysis.outline):
        by_file.setdefault(entry["attachment_id"], []).append(entry)
    files: list[dict[str, Any]] = []
    for attachment in material.files:
        entries = by_file.get(attachment.pk, [])
        title = content.title_of(attachment, entries)
        # The title heads the whole file: its sections are the file's first level.
        entries = [e for e in entries if e["text"] != title]
        first = min((e["level"] for e in entries), default=1)
        top: list[dict[str, Any]] = []
        for entry in entries:
            node = {"text": f"{entry['text']} [{cites.cite(entry, entry['text'])}]",
                    "label": entry["text"], "children": []}  # fmt: skip
            if entry["level"] == first or not top:
                top.append(node)
            elif len(top[-1]["children"]) < MAP_CHILDREN:
                top[-1]["children"].append(node)
        files.append({"text": "", "label": title,
                      "cited": False, "children": top[:MAP_CHILDREN]})  # fmt: skip
    beat("outline", 60)
    topics = []
    for phrase in analysis.phrases:
        found = _first_mention(material, phrase, analysis.pool)
        if found is not None:
            topics.append({"text": f"{phrase} [{cites.cite(_of(found), phrase)}]", "label": phrase,
                           "topic": True, "children": []})  # fmt: skip
    beat("topics", 90)
    _writing(beat, 92)
    grouped = drafting.themes(topics, material.title, material.user)
    if grouped is not None:
        topics = grouped
        material.answered_by.add("llm")
    topic_node = {"text": "", "label": _("Key topics"), "cited": False, "children": topics}
    # One file: its sections are the first level.
    level: list[dict[str, Any]] = list(files[0]["children"]) if len(files) == 1 else files
    root = {"text": "", "label": material.title, "cited": False,
            "children": [*level, topic_node]}  # fmt: skip
    return cites.finish([{"heading": material.title, "items": [root], "keep": True}])


def _without_boilerplate(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The outline without the sections whose passages are all boilerplate (a licence
    appended at the back, an index): the map shows what the sources are about."""
    out = []
    for entry in entries:
        chunks = list(
            DocumentChunk.objects.filter(
                attachment_id=entry["attachment_id"], heading_path__contains=[entry["text"]]
            ).values_list("pk", flat=True)[:20]
        )
        if not chunks or len(boilerplate_chunks(chunks)) < len(chunks):
            out.append(entry)
    return out


def _first_mention(material: Material, phrase: str, pool: list[Passage]) -> Passage | None:
    for p in pool:
        if phrase in p.text:
            return p
    return None


def flashcards(material: Material, beat: Beat) -> dict[str, Any]:
    """Cards: a key phrase and the sentence that defines it; a question and the passage the
    chat answers it with (its verified quote on the back)."""
    analysis = analyse(material, beat)
    cites = Citations()
    found = definitions(material, analysis, beat, 35, 60)
    cards: list[dict[str, Any]] = [{"front": p, "back": cites.sentence(s)} for p, s in found]
    for a in answered_questions(material, analysis, cites, CARDS - len(cards), beat, 60, 95):
        # The back: the answer's quote, or the whole passage when the quote is a mere heading.
        if len(a.quote.split()) < 6:
            cards.append({"front": a.question, "back": a.text, "markdown": True})
        else:
            back = f"{a.quote} [{cites.cite(a.source, a.quote)}]"
            cards.append({"front": a.question, "back": back})
    return cites.finish([{"heading": _("Flashcards"), "items": cards[:CARDS]}])


def quiz(material: Material, beat: Beat) -> dict[str, Any]:
    """Multiple-choice questions: a sentence that defines a key phrase, the phrase blanked
    out (a cloze), the phrase and up to three other key phrases of the sources as options;
    the answer is the verified quote."""
    analysis = analyse(material, beat, phrases=max(CONCEPTS, QUIZ + OPTIONS))
    cites = Citations()
    found = definitions(material, analysis, beat, 35, 95)
    phrases = [p for p, _s in found] + [p for p in analysis.phrases if p not in dict(found)]
    items = []
    for phrase, s in found[:QUIZ]:
        blanked = re.sub(re.escape(phrase), BLANK, s.text, count=1, flags=re.IGNORECASE)
        others = [p for p in phrases if p.casefold() != phrase.casefold()
                  and p.casefold() not in s.text.casefold()][: OPTIONS - 1]  # fmt: skip
        if not others:
            continue
        options = sorted(
            [phrase, *others], key=lambda p: hashlib.sha256(f"{s.text}{p}".encode()).hexdigest()
        )
        items.append({"question": blanked, "options": options, "answer": options.index(phrase),
                      "text": cites.sentence(s)})  # fmt: skip
    return cites.finish([{"heading": _("Quiz"), "items": items}])


BUILDERS: dict[str, Callable[[Material, Beat], dict[str, Any]]] = {
    "briefing": briefing,
    "study_guide": study_guide,
    "faq": faq,
    "timeline": timeline,
    "mind_map": mind_map,
    "flashcards": flashcards,
    "quiz": quiz,
}


def preview(text: str) -> str:
    return clip(MARKER.sub("", text), 120)
