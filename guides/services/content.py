"""What a guide says, built from the stored pages, chunks and vectors, without a language model:
the heading outline, the central sentences (quoted verbatim with their page), key topics and
suggested questions that a search over the same sources answers.

Central sentences are found in two steps, so that a 2,000-page PDF costs no more than a short
one: the passages most central to the sources (highest cosine similarity to the mean of the
stored passage vectors, picked with maximal marginal relevance so they cover different parts),
then, among the sentences of those passages, embedded now, the most central ones, again with
MMR."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attachments.models import ChunkVector, DocumentChunk, DocumentPage, NoteAttachment
from chat.citations import normalise, quotable
from chat.extractive import _real_heading as real_heading
from chat.grounding import ABSTAIN_COVERAGE, key_terms, sentences, terms
from notebook.embeddings import get_embedder
from search.retrieval import Scope, search

if TYPE_CHECKING:
    import numpy as np

    from notebook.types import User

MAX_VECTORS = 8000  # passages weighed for centrality; a larger set is sampled evenly
CENTRAL_PASSAGES = 10
MAX_CANDIDATES = 160  # sentences embedded per guide
MMR_LAMBDA = 0.7  # weight of centrality against difference from what was already picked
OUTLINE_LEVELS = 3
MAX_OUTLINE = 60
MAX_TOPICS = 6
QUESTIONS = 3
MAX_QUESTION_SEARCHES = 12
FOCUS_COVERAGE = 0.75  # share of a question's focus words the answering passage must hold
_NUMBERING = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|[A-Z]\.|[IVX]+\.)\s+")
_GENERIC = re.compile(
    r"^(?:contents|table of contents|index|references|bibliography|literature|acknowledg\w*|"
    r"preface|foreword|appendix|license|licence|copyright|about this \w+|notes|"
    r"inhalt|inhaltsverzeichnis|literaturverzeichnis|vorwort|danksagung|anhang|register|"
    r"目录|参考文献|索引|前言|致谢|附录)\b",
    re.IGNORECASE,
)
_CONTENTS = re.compile(
    r"^(?:table of contents|contents|inhalt|inhaltsverzeichnis|目录|目\s*录)$", re.IGNORECASE
)
_TOC_LINE = re.compile(r"(?:\.\s?){2,}\s*\w*\d+$")
_SENTENCE_START = re.compile(r"^[\"“'(]?[A-Z0-9\u00C0-\u024F\u4e00-\u9fff]")
_SENTENCE_STOP = re.compile(r"[.!?。！？][\"”')]?$")
_CODE = re.compile(r"[{}\\=<>|_#$]")
_DEFINITION = re.compile(
    r"^(?:The |An? )?(?P<subject>[A-Za-z][\w\-]*(?: [\w\-]+){0,3}) (?:is|are) (?:a|an|the) "
)
_PRONOUNS = frozenset(
    ["it", "this", "that", "these", "those", "they", "there", "he", "she", "which"]
)
_QUESTION_START = re.compile(
    r"^(?:how|why|what|when|which|who|where|wie|warum|was|wann|welche)\b", re.IGNORECASE
)


@dataclass
class Passage:
    chunk_id: int
    attachment_id: int
    file: str
    page: int
    index: int
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
    return [
        Passage(
            c.pk,
            c.attachment_id,
            c.attachment.original_name,
            c.page_number,
            c.index,
            c.content,
            list(c.heading_path),
        )
        for c in rows
    ]


# --- Outline and title


def clean_heading(text: str) -> str:
    return " ".join(text.split())


def outline(
    attachments: list[NoteAttachment], *, levels: int = OUTLINE_LEVELS, limit: int = MAX_OUTLINE
) -> list[dict[str, Any]]:
    """Each file's headings in reading order with their level and first page: real headings
    only (not footnotes, list items or sentences: chat.extractive's rule for suggesting a
    section), at most `levels` deep and `limit` per file."""
    out: list[dict[str, Any]] = []
    for attachment in attachments:
        seen: set[str] = set()
        count = 0
        rows = DocumentChunk.objects.filter(attachment=attachment).order_by("index")
        for page, path in rows.values_list("page_number", "heading_path"):
            for depth in range(1, min(len(path), levels) + 1):
                key = tuple(clean_heading(h) for h in path[:depth])
                text = key[-1]
                if text.casefold() in seen or count >= limit:
                    continue
                if any(_CONTENTS.match(h) for h in key):
                    break  # a table of contents lists headings; they count where they head
                seen.add(text.casefold())
                if not _outline_heading(text) or not all(real_heading(h) for h in key[:-1]):
                    continue
                count += 1
                out.append(
                    {
                        "text": text,
                        "level": depth,
                        "page": page,
                        "attachment_id": attachment.pk,
                        "file": attachment.original_name,
                    }
                )
    return out


def _outline_heading(text: str) -> bool:
    """A heading worth listing: chat.extractive's rule (no footnote, list item or sentence),
    not a table-of-contents line ("2 Vectors . . 8") nor the wrapped end of a heading ("set")."""
    if not real_heading(text) or _TOC_LINE.search(text):
        return False
    return len(text) >= 8 or bool(_NUMBERING.match(text)) or text[:1].isupper()


def title_of(attachment: NoteAttachment, entries: list[dict[str, Any]]) -> str:
    """The first top-level heading on the first two pages, else the file's name."""
    for entry in entries:
        if entry["attachment_id"] == attachment.pk and entry["level"] == 1 and entry["page"] <= 2:
            return str(entry["text"])
    name = attachment.original_name
    return name[:-4] if name.lower().endswith(".pdf") else name


# --- Centrality


def _matrix(vectors: list[Any]) -> np.ndarray:
    import numpy as np

    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalised: np.ndarray = matrix / norms
    return normalised


def mmr(
    matrix: np.ndarray, k: int, groups: list[int] | None = None, centre: np.ndarray | None = None
) -> list[int]:
    """Rows picked by maximal marginal relevance: centrality (cosine to `centre`, by default
    the mean row) against the highest similarity to a row already picked. With `groups`
    (the source of each row), no group gets more than its share until the others run out."""
    import numpy as np

    if not len(matrix):
        return []
    mean = matrix.mean(axis=0) if centre is None else centre
    norm = float(np.linalg.norm(mean)) or 1.0
    central = matrix @ (mean / norm)
    picked: list[int] = []
    closest = np.full(len(matrix), -1.0, dtype=np.float32)
    share = math.ceil(k / len(set(groups))) if groups else k
    taken: Counter[int] = Counter()
    while len(picked) < min(k, len(matrix)):
        score = MMR_LAMBDA * central - (1 - MMR_LAMBDA) * np.maximum(closest, 0)
        score[picked] = -np.inf
        if groups:
            full = [i for i, g in enumerate(groups) if taken[g] >= share]
            if len(full) < len(matrix) - len(picked):
                score[full] = -np.inf
        best = int(np.argmax(score))
        picked.append(best)
        if groups:
            taken[groups[best]] += 1
        closest = np.maximum(closest, matrix @ matrix[best])
    return picked


def central_passages(attachment_ids: list[int], k: int = CENTRAL_PASSAGES) -> list[Passage]:
    """The `k` passages most central to these files, spread over them and over their
    content, from the stored vectors (first window of each passage; tables left out). Files
    without vectors: evenly spaced passages."""
    rows = list(
        ChunkVector.objects.filter(attachment_id__in=attachment_ids, window=0)
        .exclude(chunk__metadata__has_key="table")
        .order_by("chunk_id")
        .values_list("chunk_id", "attachment_id")
    )
    if len(rows) > MAX_VECTORS:
        step = len(rows) / MAX_VECTORS
        rows = [rows[int(i * step)] for i in range(MAX_VECTORS)]
    if not rows:
        ids = list(
            DocumentChunk.objects.filter(attachment_id__in=attachment_ids)
            .order_by("attachment_id", "index")
            .values_list("pk", flat=True)
        )
        step = max(1, len(ids) // k)
        return passages(ids[::step][:k])
    vectors = dict(
        ChunkVector.objects.filter(chunk_id__in=[pk for pk, _ in rows], window=0).values_list(
            "chunk_id", "embedding"
        )
    )
    matrix = _matrix([vectors[pk] for pk, _ in rows])
    groups = [attachment for _, attachment in rows] if len(attachment_ids) > 1 else None
    return passages([rows[i][0] for i in mmr(matrix, k, groups)])


def good_sentence(text: str) -> bool:
    """A sentence worth quoting on its own: it starts like one and ends like one, has 8 to 60
    words (or 15+ CJK characters), and is not code or a list."""
    if not (_SENTENCE_START.match(text) and _SENTENCE_STOP.search(text)):
        return False
    if len(_CODE.findall(text)) > 2 or text.lstrip().startswith(("•", "-", "*", "–")):
        return False
    words = len(text.split())
    cjk = sum("\u4e00" <= ch <= "\u9fff" for ch in text)
    return 8 <= words <= 60 or (cjk >= 15 and len(text) <= 300)


def candidate_sentences(chosen: list[Passage]) -> list[Sentence]:
    """Quotable sentences of these passages that occur verbatim (up to whitespace) in their
    page's text, at most MAX_CANDIDATES spread over the passages."""
    pages: dict[tuple[int, int], str] = {}
    for attachment_id, number, text in DocumentPage.objects.filter(
        attachment_id__in={p.attachment_id for p in chosen},
        number__in={p.page for p in chosen},
    ).values_list("attachment_id", "number", "text"):
        pages[attachment_id, number] = quotable(text)
    out: list[Sentence] = []
    per_passage = max(4, MAX_CANDIDATES // max(1, len(chosen)))
    for passage in chosen:
        page = pages.get((passage.attachment_id, passage.page), "")
        found = [
            Sentence(s, passage, i)
            for i, s in enumerate(sentences(passage.text))
            if good_sentence(s) and normalise(s) in page
        ]
        out += found[:per_passage]
    return out[:MAX_CANDIDATES]


def central_sentences(chosen: list[Passage], count: int) -> list[Sentence]:
    """The `count` most central candidate sentences (embedded now), with diversity, in
    document order. Raises EmbeddingError when the embedder fails."""
    candidates = candidate_sentences(chosen)
    if not candidates:
        return []
    matrix = _matrix(get_embedder().embed([c.text for c in candidates]))
    groups = [c.passage.attachment_id for c in candidates]
    picked = [candidates[i] for i in mmr(matrix, count, groups if len(set(groups)) > 1 else None)]
    order = {p.chunk_id: n for n, p in enumerate(chosen)}
    return sorted(picked, key=lambda s: (order[s.passage.chunk_id], s.position))


def quoted(sentence: Sentence) -> dict[str, Any]:
    p = sentence.passage
    citation = {
        "attachment_id": p.attachment_id,
        "file": p.file,
        "page": p.page,
        "quote": sentence.text,
    }
    return {"text": sentence.text, "quoted": True, "citations": [citation]}


def sentence_count(chunks: int) -> int:
    return 5 if chunks >= 20 else 4 if chunks >= 8 else 3


# --- Topics


def strip_numbering(heading: str) -> str:
    return _NUMBERING.sub("", heading).strip()


def topics(entries: list[dict[str, Any]], chosen: list[Passage], title: str) -> list[str]:
    """Key topics: the shallowest headings of the outline (numbering stripped, not generic
    ones such as "Contents" or "Index"), then the names and terms the central passages use
    most (code, CamelCase names, acronyms)."""
    out: list[str] = []
    for level in (1, 2):
        for entry in entries:
            text = strip_numbering(str(entry["text"]))
            if entry["level"] != level or not text or _GENERIC.match(text) or text == title:
                continue
            if text.casefold() not in {t.casefold() for t in out} and len(out) < MAX_TOPICS:
                out.append(text)
        if len(out) >= 3:
            break
    if len(out) < 3:
        counts = Counter(t for p in chosen for t in key_terms(p.text))
        for term, n in counts.most_common():
            if len(out) >= MAX_TOPICS:
                break
            if n >= 2 and term.casefold() not in {t.casefold() for t in out}:
                out.append(term)
    return out[:MAX_TOPICS]


# --- Suggested questions


@dataclass
class Question:
    text: str
    focus: str  # the words an answering passage must hold
    coverage: float = FOCUS_COVERAGE


def heading_questions(entries: list[dict[str, Any]], title: str) -> list[Question]:
    """A question per section worth asking about, spread over the outline: its shallowest
    levels first, every file's in turn."""
    by_file: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        if entry["level"] <= 2:
            by_file[entry["attachment_id"]].append(entry)
    queues: list[list[dict[str, Any]]] = []
    for items in by_file.values():
        items = sorted(items, key=lambda e: e["level"])  # stable: reading order within a level
        queues.append(items[:: max(1, len(items) // 6)])
    ordered: list[dict[str, Any]] = []
    while queues:  # every file's in turn
        ordered += [queue.pop(0) for queue in queues]
        queues = [queue for queue in queues if queue]
    out: list[Question] = []
    for entry in ordered:
        text = strip_numbering(str(entry["text"]))
        if len(text) < 4 or _GENERIC.match(text) or text == title:
            continue
        if text.endswith("?"):
            asked = text
        elif _QUESTION_START.match(text):
            asked = f"{text}?"
        else:
            asked = f"What does the section “{text}” explain?"
        out.append(Question(asked, text))
    return out


def definition_questions(candidates: list[Sentence]) -> list[Question]:
    """ "What is X?" for the sentences that define X ("X is a …")."""
    out: list[Question] = []
    for sentence in candidates:
        match = _DEFINITION.match(sentence.text)
        if not match:
            continue
        subject = match.group("subject").strip()
        if subject.split()[0].casefold() in _PRONOUNS or len(subject) < 3:
            continue
        verb = "are" if sentence.text[match.end("subject") :].startswith(" are") else "is"
        the = "the " if sentence.text.startswith("The ") else ""
        out.append(Question(f"What {verb} {the}{subject}?", subject))
    return out


def answering_passage(user: User, question: Question, scope: Scope) -> dict[str, Any] | None:
    """The passage that answers a suggested question, or None: among the first three hits of
    the search the chat itself runs for it (hybrid, scoped to the guide's sources), the first
    that holds at least `question.coverage` of the focus words (in its text or its heading
    path) and at least one whole sentence (not a bare heading or a table)."""
    wanted = terms(question.focus)
    if not wanted:
        return None
    found = search(user=user, query=question.text, scope=scope, limit=3, rerank=False)
    for hit in found.hits:
        if hit.chunk is None:
            continue
        have = terms(hit.text) | terms(" ".join(hit.chunk.heading_path))
        if len(wanted & have) / len(wanted) >= question.coverage and sentences(hit.text):
            return {
                "text": question.text,
                "attachment_id": hit.chunk.attachment_id,
                "file": hit.chunk.attachment.original_name,
                "page": hit.chunk.page_number,
                "chunk_id": hit.chunk.pk,
            }
    return None


def verified_questions(
    user: User, candidates: list[Question], scope: Scope, limit: int = QUESTIONS
) -> list[dict[str, Any]]:
    """Up to `limit` of the candidates that retrieval answers (see answering_passage), no two
    alike, at most MAX_QUESTION_SEARCHES searches."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    searches = 0
    for question in candidates:
        if len(out) >= limit or searches >= MAX_QUESTION_SEARCHES:
            break
        key = question.text.casefold()
        if key in seen:
            continue
        seen.add(key)
        searches += 1
        answer = answering_passage(user, question, scope)
        if answer is not None:
            out.append(answer)
    return out


MODEL_QUESTION_COVERAGE = 2 / 3


def model_question(text: str) -> Question:
    """A question a model suggested: its own content words are the focus, and the answering
    passage must hold two thirds of them (more than the half the answerers ask of a sentence:
    "Who likes cheese?" shares "like" with many a passage)."""
    return Question(text, text, max(ABSTAIN_COVERAGE, MODEL_QUESTION_COVERAGE))
