"""What a guide says, built from the stored pages, chunks and vectors, without a language model:
the heading outline, a lead (a source's own introduction, else its most central sentences,
quoted verbatim with their page), key phrases and suggested questions that a search over the
same sources answers. Boilerplate (search.boilerplate) is never quoted, topical or an answer.

Central sentences are found in two steps, so that a 2,000-page PDF costs no more than a short
one: the passages most central to the sources (cosine to the mean stored passage vector,
picked with maximal marginal relevance among the more central half), then the most central of
their sentences, embedded now, again with MMR."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from itertools import zip_longest
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from django.utils.translation import gettext, gettext_noop

from attachments.models import ChunkVector, DocumentChunk, DocumentPage, NoteAttachment
from core.embeddings import get_embedder
from grounding.citations import normalise, quotable
from grounding.evidence import ABSTAIN_COVERAGE, sentences, terms
from guides.services.phrases import matrix, mmr
from search.boilerplate import boilerplate_chunks, contents_like
from search.retrieval import Scope, search

if TYPE_CHECKING:
    from core.types import User

MAX_VECTORS = 8000  # passages weighed for centrality; a larger set is sampled evenly
CENTRAL_PASSAGES = 10
MAX_CANDIDATES = 160  # sentences embedded per guide
OUTLINE_LEVELS = 3
MAX_OUTLINE = 60
QUESTIONS = 3
TOPIC_POOL = 4  # × the central passages: where key phrases are looked for
MAX_QUESTION_SEARCHES = 12
LEAD_PAGES = 0.2  # a lead is looked for on the first fifth of the pages (at least 3)
LEAD_CENTRALITY = 75  # percentile of the passages' centrality a lead must reach
PROSE_SHARE = 0.6  # of a passage's text in whole sentences: running prose
MAX_NOTEBOOK_LEADS = 8  # sources a notebook guide's summary quotes the introduction of
DEFINES = 0.6  # similarity of a sentence to "What is meant by X?" for it to answer it
_NUMBERING = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|[A-Z]\.|[IVX]+\.)\s+")
_SENTENCE_START = re.compile(r"^[\"“'(]?[A-Z0-9\u00C0-\u024F\u4e00-\u9fff]")
_SENTENCE_STOP = re.compile(r"[.!?。！？][\"”')]?$")
_CODE = re.compile(r"[{}\\=<>|_#$]")
# List items are not headings: "3) Step.", "• item" (footnotes are small print, which the
# chunker never takes for a heading).
_LIST_ITEM = re.compile(r"^\s*(?:\d+[.)]\s+\S.*[.:;]$|[•*(\-–])")
# Suggested questions, translated when shown (guides.templatetags.guides): the guide is written
# in the background, where no reader's language is known.
TEMPLATES = {
    "section": gettext_noop("What does the section “%(subject)s” explain?"),
    "definition": gettext_noop("What is meant by “%(subject)s”?"),
}


@dataclass
class Passage:
    chunk_id: int
    attachment_id: int
    file: str
    page: int
    text: str
    heading_path: list[str]


@dataclass
class Sentence:
    text: str
    passage: Passage
    position: int


def passages(chunk_ids: list[int]) -> list[Passage]:
    """Passages of these chunks in document order (file, then position)."""
    rows = (
        DocumentChunk.objects.filter(pk__in=chunk_ids)
        .select_related("attachment")
        .order_by("attachment__created_at", "attachment_id", "index")
    )
    return [Passage(c.pk, c.attachment_id, c.attachment.original_name, c.page_number, c.content,
                    list(c.heading_path)) for c in rows]  # fmt: skip


# --- Outline and title


def clean_heading(text: str) -> str:
    return " ".join(text.split())


def unnumbered(heading: str) -> str:
    """A heading without its number ("2.1 Frames" → "Frames")."""
    return _NUMBERING.sub("", heading).strip()


def real_heading(text: str) -> bool:
    """A heading worth listing: short, not a sentence, a footnote, a list item, a contents
    line ("2 Vectors . . 8") nor the wrapped end of a heading ("set")."""
    if not 3 <= len(text) <= 80 or text.endswith((".", ",", ";", ":")) or contents_like(text):
        return False
    if _LIST_ITEM.search(text) or len(text.split()) > 10:
        return False
    return len(text) >= 8 or bool(_NUMBERING.match(text)) or text[:1].isupper()


def outline(
    attachments: list[NoteAttachment], *, levels: int = OUTLINE_LEVELS, limit: int = MAX_OUTLINE
) -> list[dict[str, Any]]:
    """Each file's headings in reading order with their level and first page: real headings
    under real headings, at most `levels` deep and `limit` per file. A table of contents
    lists headings: they count where they head, not there."""
    out: list[dict[str, Any]] = []
    for attachment in attachments:
        seen: set[str] = set()
        rows = DocumentChunk.objects.filter(attachment=attachment).order_by("index")
        for page, path, text in rows.values_list("page_number", "heading_path", "content"):
            if contents_like(text):
                continue
            key = [clean_heading(h) for h in path[:levels]]
            for depth, heading in enumerate(key, start=1):
                if heading.casefold() in seen or len(seen) >= limit:
                    continue
                if not all(real_heading(h) for h in key[:depth]):
                    break
                seen.add(heading.casefold())
                out.append({"text": heading, "level": depth, "page": page,
                            "attachment_id": attachment.pk,
                            "file": attachment.original_name})  # fmt: skip
    return out


def title_of(attachment: NoteAttachment, entries: list[dict[str, Any]]) -> str:
    """The first top-level heading on the first two pages, else the file's name."""
    for entry in entries:
        if entry["attachment_id"] == attachment.pk and entry["level"] == 1 and entry["page"] <= 2:
            return str(entry["text"])
    name = attachment.original_name
    return name[:-4] if name.lower().endswith(".pdf") else name


# --- Centrality


class Vectors(NamedTuple):
    """The stored first-window vectors of some files' passages (tables left out; sampled
    evenly beyond MAX_VECTORS), their normalised mean and each one's cosine to it."""

    chunk_ids: list[int]
    groups: list[int]  # the file of each row
    matrix: np.ndarray
    centre: np.ndarray
    centrality: np.ndarray


def vectors(attachment_ids: list[int]) -> Vectors | None:
    rows = list(
        ChunkVector.objects.filter(attachment_id__in=attachment_ids, window=0)
        .exclude(chunk__metadata__has_key="table")
        .order_by("chunk_id")
        .values_list("chunk_id", "attachment_id")
    )
    if len(rows) > MAX_VECTORS:
        rows = [rows[int(i * len(rows) / MAX_VECTORS)] for i in range(MAX_VECTORS)]
    if not rows:
        return None
    ids = [pk for pk, _ in rows]
    found = dict(
        ChunkVector.objects.filter(chunk_id__in=ids, window=0).values_list("chunk_id", "embedding")
    )
    embedded = matrix([found[pk] for pk in ids])
    centre = embedded.mean(axis=0) / (np.linalg.norm(embedded.mean(axis=0)) or 1.0)
    return Vectors(ids, [a for _, a in rows], embedded, centre, embedded @ centre)


def central_passages(
    attachment_ids: list[int], k: int = CENTRAL_PASSAGES
) -> tuple[list[Passage], list[Passage], Vectors | None]:
    """The `k` passages most central to these files, spread over them and over their
    content, none of them boilerplate (MMR among the more central half of each file: an outlier
    is not central, however different it is); the TOPIC_POOL × k picked the same way (where key
    phrases are looked for); the files' vectors."""

    found = vectors(attachment_ids)
    if found is None:
        return [], [], None
    files = np.asarray(found.groups)
    medians = {g: np.median(found.centrality[files == g]) for g in set(found.groups)}
    rows = np.flatnonzero(found.centrality >= np.vectorize(medians.get)(files))
    groups = [found.groups[i] for i in rows] if len(attachment_ids) > 1 else None
    picked = [found.chunk_ids[rows[i]] for i in mmr(found.matrix[rows], TOPIC_POOL * k, groups)]
    flagged = boilerplate_chunks(picked)
    file_of = dict(zip(found.chunk_ids, found.groups, strict=True))
    by_file: dict[int, list[int]] = {}
    for pk in picked:
        if pk not in flagged:
            by_file.setdefault(file_of[pk], []).append(pk)
    kept = [pk for turn in zip_longest(*by_file.values()) for pk in turn if pk]  # files in turn
    return passages(kept[:k]), passages(kept), found


def good_sentence(text: str) -> bool:
    """A sentence worth quoting on its own: it starts like one and ends like one, has 8 to 60
    words (or 15+ CJK characters), and is not code, a list or strewn with glyphs: a third of
    its words single characters is what a music or symbol font leaves in extracted text
    ("Eindruck. h ª h ª h h h …"), not a sentence of any language written with spaces."""
    if not (_SENTENCE_START.match(text) and _SENTENCE_STOP.search(text)):
        return False
    if len(_CODE.findall(text)) > 2 or text.lstrip().startswith(("•", "-", "*", "–")):
        return False
    tokens = text.split()
    single = sum(len(token) == 1 and not "\u4e00" <= token <= "\u9fff" for token in tokens)
    if single >= 4 and single * 3 >= len(tokens):
        return False
    words = len(tokens)
    cjk = sum("\u4e00" <= ch <= "\u9fff" for ch in text)
    return 8 <= words <= 60 or (cjk >= 15 and len(text) <= 300)


def candidate_sentences(chosen: list[Passage], per_passage: int = 0) -> list[Sentence]:
    """Quotable sentences of these passages that occur verbatim (up to whitespace) in their
    page's text, at most MAX_CANDIDATES spread over the passages."""
    rows = DocumentPage.objects.filter(
        attachment_id__in={p.attachment_id for p in chosen}, number__in={p.page for p in chosen}
    ).values_list("attachment_id", "number", "text")
    pages = {(attachment, number): quotable(text) for attachment, number, text in rows}
    out: list[Sentence] = []
    per_passage = per_passage or max(4, MAX_CANDIDATES // max(1, len(chosen)))
    for passage in chosen:
        page = pages.get((passage.attachment_id, passage.page), "")
        headings = [clean_heading(h) for h in passage.heading_path]
        said = [_after_heading(s, headings) for s in sentences(passage.text)]
        found = [Sentence(s, passage, i) for i, s in enumerate(said)
                 if good_sentence(s) and normalise(s) in page]  # fmt: skip
        out += found[:per_passage]
    return out[:MAX_CANDIDATES]


def _after_heading(sentence: str, headings: list[str]) -> str:
    """A sentence without the heading it runs on from ("Preface This introduction …")."""
    for heading in headings:
        if sentence.startswith(heading + " "):
            return sentence[len(heading) :].lstrip()
    return sentence


def central_sentences(chosen: list[Passage], count: int) -> list[Sentence]:
    """The `count` most central candidate sentences (embedded now), with diversity, in
    document order. Raises EmbeddingError when the embedder fails."""
    candidates = candidate_sentences(chosen)
    if not candidates:
        return []
    embedded = matrix(get_embedder().embed([c.text for c in candidates]))
    groups = [c.passage.attachment_id for c in candidates]
    picked = [candidates[i] for i in mmr(embedded, count, groups if len(set(groups)) > 1 else None)]
    order = {p.chunk_id: n for n, p in enumerate(chosen)}
    return sorted(picked, key=lambda s: (order[s.passage.chunk_id], s.position))


def lead(attachment: NoteAttachment, found: Vectors | None, count: int) -> list[Sentence]:
    """The opening sentences of the document's own abstract or introduction: the first
    section on its first pages of running prose (3+ sentences in its first two passages, most
    of their text) that opens with a passage as central as the top quarter of them and not
    boilerplate. [] when none is."""

    if found is None:
        return []
    centrality = dict(zip(found.chunk_ids, found.centrality.tolist(), strict=True))
    floor = float(np.percentile(found.centrality, LEAD_CENTRALITY))
    last = max(3, math.ceil(LEAD_PAGES * (attachment.page_count or 0)))
    front = passages(list(DocumentChunk.objects.filter(
        attachment=attachment, page_number__lte=last).values_list("pk", flat=True)))  # fmt: skip
    for n, passage in enumerate(front):
        if n and front[n - 1].heading_path == passage.heading_path:
            continue  # not where a section starts
        section = [p for p in front[n:] if p.heading_path == passage.heading_path][:2]
        text = " ".join(" ".join(p.text.split()) for p in section)
        said = sentences(text)
        if len(said) < 3 or sum(map(len, said)) < PROSE_SHARE * len(text):
            continue
        if centrality.get(passage.chunk_id, -1.0) < floor or boilerplate_chunks([passage.chunk_id]):
            continue
        return candidate_sentences(section, per_passage=count)[:count]
    return []


def notebook_summary(
    files: list[NoteAttachment], chosen: list[Passage], limit: int = MAX_NOTEBOOK_LEADS
) -> list[tuple[Sentence, bool]]:
    """A notebook's summary in its sources' own words, one sentence per source in the
    notebook's order (at most `limit`): the opening of the source's abstract or introduction
    (`lead`; True beside it), else its most central sentence among the notebook's central
    passages `chosen`. A copy of a source says nothing new and is left out."""
    openings: dict[int, Sentence] = {}
    for attachment in files[:limit]:
        found = lead(attachment, vectors([attachment.pk]), 1)
        if found:
            openings[attachment.pk] = found[0]
    rest = [p for p in chosen if p.attachment_id not in openings]
    central: dict[int, Sentence] = {}
    if rest:
        wanted = len({p.attachment_id for p in rest})
        for best in central_sentences(rest, wanted):
            central.setdefault(best.passage.attachment_id, best)
    out: list[tuple[Sentence, bool]] = []
    seen: set[str] = set()
    for attachment in files[:limit]:
        said = openings.get(attachment.pk) or central.get(attachment.pk)
        if said is not None and normalise(said.text) not in seen:
            seen.add(normalise(said.text))
            out.append((said, attachment.pk in openings))
    return out


def quoted(sentence: Sentence, *, lead: bool = False) -> dict[str, Any]:
    """A summary sentence that is a quote; `lead`: of the document's own introduction."""
    p = sentence.passage
    citation = {"attachment_id": p.attachment_id, "file": p.file, "page": p.page,
                "quote": sentence.text}  # fmt: skip
    return {"text": sentence.text, "quoted": True, "lead": lead, "citations": [citation]}


def sentence_count(chunks: int) -> int:
    return 5 if chunks >= 20 else 4 if chunks >= 8 else 3


# --- Suggested questions


@dataclass
class Question:
    template: str  # a key of TEMPLATES, or "" for a question written out (a model's)
    subject: str
    coverage: float = 0.0  # a written-out question: share of its words the answer must hold

    @property
    def text(self) -> str:
        """The question in English (what the API shows and the search is run with)."""
        if not self.template:
            return self.subject
        return TEMPLATES[self.template] % {"subject": self.subject}


def shown(question: dict[str, Any]) -> str:
    """A stored suggested question in the reader's language."""
    template = TEMPLATES.get(str(question.get("template") or ""))
    return gettext(template) % {"subject": question["subject"]} if template else question["text"]


def section_questions(
    entries: list[dict[str, Any]], title: str, found: Vectors | None
) -> list[Question]:
    """A question per section of the outline's first two levels, the sections whose heading
    is closest to the sources' mean vector first, with diversity and every file in turn; not
    the title nor the unnumbered lines of the first page (a subtitle, the authors)."""
    wanted = {
        e["text"]: e
        for e in entries
        if e["level"] <= 2 and e["text"] != title and (e["page"] > 1 or _NUMBERING.match(e["text"]))
    }
    sections = list(wanted.values())
    if found is None or not sections:
        return [Question("section", e["text"]) for e in sections]
    rows = matrix(get_embedder().embed([_NUMBERING.sub("", e["text"]) for e in sections]))
    groups = [e["attachment_id"] for e in sections]
    order = mmr(rows, len(rows), groups if len(set(groups)) > 1 else None, centre=found.centre)
    return [Question("section", sections[i]["text"]) for i in order]


def _defined(question: Question, chunks: list[DocumentChunk]) -> set[int]:
    """The chunks holding a whole sentence that names the phrase and is close to the question
    in meaning (DEFINES): the answer to "What is meant by X?"."""
    named = {(s, c.pk) for c in chunks for s in sentences(c.content)
             if good_sentence(s) and question.subject.casefold() in s.casefold()}  # fmt: skip
    if not named:
        return set()
    embedded = matrix(get_embedder().embed([question.text, *(s for s, _ in named)]))
    close = embedded[1:] @ embedded[0] >= DEFINES
    return {pk for (_, pk), yes in zip(named, close, strict=True) if yes}


def answering_passage(user: User, question: Question, scope: Scope) -> dict[str, Any] | None:
    """The passage that answers a suggested question, or None: among the first three passages
    of the search the chat itself runs for it (hybrid, scoped to the guide's sources) that are
    not boilerplate, the first holding a whole sentence and the evidence its kind asks for: a
    section question's heading above it, a definition (`_defined`), or `coverage` of a written
    question's content words."""
    found = search(user=user, query=question.text, scope=scope, limit=5, rerank=False)
    chunks = [hit.chunk for hit in found.hits if hit.chunk is not None]
    flagged = boilerplate_chunks(chunk.pk for chunk in chunks)
    chunks = [chunk for chunk in chunks if chunk.pk not in flagged][:3]
    defined = _defined(question, chunks) if question.template == "definition" else set()
    wanted = terms(question.subject)
    for chunk in chunks:
        if question.template == "section":
            evidence = question.subject in [clean_heading(h) for h in chunk.heading_path]
        elif question.template == "definition":
            evidence = chunk.pk in defined
        else:
            have = terms(chunk.content) | terms(" ".join(chunk.heading_path))
            evidence = bool(wanted) and len(wanted & have) / len(wanted) >= question.coverage
        if evidence and sentences(chunk.content):
            return {"text": question.text, "template": question.template,
                    "subject": question.subject, "attachment_id": chunk.attachment_id,
                    "file": chunk.attachment.original_name, "page": chunk.page_number,
                    "chunk_id": chunk.pk}  # fmt: skip
    return None


def verified_questions(
    user: User, candidates: list[Question], scope: Scope, limit: int = QUESTIONS
) -> list[dict[str, Any]]:
    """Up to `limit` of the candidates that retrieval answers (see answering_passage), no two
    alike, at most MAX_QUESTION_SEARCHES searches."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for question in candidates:
        if len(out) >= limit or len(seen) >= MAX_QUESTION_SEARCHES:
            break
        if question.text.casefold() in seen:
            continue
        seen.add(question.text.casefold())
        answer = answering_passage(user, question, scope)
        if answer is not None:
            out.append(answer)
    return out


def model_question(text: str) -> Question:
    """A question a model suggested: its own content words are the focus, and the answering
    passage must hold two thirds of them (more than the half the answerers ask of a sentence:
    "Who likes cheese?" shares "like" with many a passage)."""
    return Question("", text, max(ABSTAIN_COVERAGE, 2 / 3))
