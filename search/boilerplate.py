"""Boilerplate among stored passages: tables of contents and indexes, licence and copyright
notices, front and back matter off the document's subject. A guide never quotes them; an
answer should use them only when nothing else answers (a question may ask what the table of
contents lists or which release a manual is for).

Found by general means, without phrase lists, from the stored chunks and their vectors:

- `CONTENTS`: most of a passage's lines are page references: text ending in a page number
  after dot leaders, a comma or spaces ("2.1 Vectors . . . . 8", "bm 宏包, 50"), a dot leader
  alone, or a bare page number; or it sits under a heading that is such a line (the chunker
  took a contents line for a heading).
- `REPEATED`: at least half of its word shingles recur in an unrelated document of the same
  owner (other bytes, and not another version of it: the two documents share few other
  passages) or on two other pages of its own document. A licence or a copyright notice
  repeats from manual to manual. Candidates come from the passage vectors' HNSW index, so a
  passage costs one index scan; the shingles decide.
- `ASIDE`: on the first or last tenth of the pages, rounded up (front or back matter), and far
  off the document's subject: its similarity to the document's mean passage vector is a robust
  outlier (2.5 median absolute deviations below the median), or most of the edge passages
  of its top-level section are. A licence appended to a book, a list of contributors.

Nothing is stored: a call costs an index scan per passage, plus one aggregate per document
for `ASIDE` (kept per process while the document is unchanged), so the chat may call it on
the ten passages behind an answer. Scoped to the owner's own documents, so no one learns
from a flag what another user's files hold.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.db import connection, transaction
from django.db.models.functions import Mod

from attachments.models import DocumentChunk, NoteAttachment
from core.textutil import unhyphenated


class Reason(StrEnum):
    CONTENTS = "contents"
    REPEATED = "repeated"
    ASIDE = "aside"


CONTENTS_SHARE = 0.5  # of a passage's lines that are page references
SHINGLE = 5  # words (a CJK character counts as one)
SHARED = 0.5  # share of a passage's shingles found in another passage: the same text
MIN_SHARED = 8  # shingles: below this a passage is too short to call a copy
NEIGHBOURS = 8  # nearest passages looked at per passage
REPEAT_PAGES = 2  # other pages of its own document a passage must recur on
VERSION_SAMPLE = 8  # passages of a document looked for in another to tell versions apart
VERSION_SHARE = 0.25  # of those found: the other document is a version of this one
EDGE = 0.1  # share of the pages at each end that is front or back matter
MIN_CHUNKS = 12  # for ASIDE: fewer passages give no distribution to stand out of
OUTLIER = 2.5  # robust z-score below which a passage is off the document's subject
EF_SEARCH = 100

_REFERENCE = re.compile(
    r"(?:(?:\s?\.){2,}|[…·]+|,|\s)\s*(?:\d{1,4}|[ivxlcdm]{1,6})(?:\s*[,–-]\s*\d{1,4})*$"
    r"|(?:\s?\.){3,}$|^(?:\d{1,4}|[ivxlcdm]{1,6})$",
    re.IGNORECASE,
)
_LEADER = re.compile(r"(?:\s?\.){2,}\s*(?:\d{1,4}|[ivxlcdm]{1,6})$", re.IGNORECASE)
_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W_]+")


def contents_like(text: str) -> bool:
    """Whether most lines of `text` are page references (a table of contents, an index or a
    list of figures). Lines of one or two characters (an index's letter) do not count."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if len(line) > 2 or line.isdigit()]
    if len(lines) < 3:
        return len(lines) > 0 and all(_LEADER.search(line) for line in lines)
    references = sum(bool(_REFERENCE.search(line)) for line in lines)
    # A numeric table ends its lines in numbers too, but not after a word and a leader,
    # so at least one line must have letters before its reference.
    worded = any(_REFERENCE.search(line) and re.search(r"[^\W\d_]{2}", line) for line in lines)
    return worded and references >= CONTENTS_SHARE * len(lines)


def shingles(text: str) -> set[tuple[str, ...]]:
    """Runs of SHINGLE words (CJK characters one each), case and line-break hyphens folded."""
    words = _TOKEN.findall(unhyphenated(text).casefold())
    return {tuple(words[i : i + SHINGLE]) for i in range(max(0, len(words) - SHINGLE + 1))}


def _copy_of(mine: set[tuple[str, ...]], other: set[tuple[str, ...]]) -> bool:
    shared = len(mine & other)
    return shared >= MIN_SHARED and shared >= SHARED * len(mine)


@dataclass
class _Chunk:
    pk: int
    attachment_id: int
    page: int
    index: int
    text: str
    heading_path: list[str]


def boilerplate(chunk_ids: Iterable[int]) -> dict[int, Reason]:
    """The boilerplate among these chunks, with why (see the module's docstring); chunks
    that are not boilerplate (or do not exist) are left out."""
    chunks = [
        _Chunk(pk, attachment, page, index, text, path)
        for pk, attachment, page, index, text, path in DocumentChunk.objects.filter(
            pk__in=set(chunk_ids)
        ).values_list("pk", "attachment_id", "page_number", "index", "content", "heading_path")
    ]
    out: dict[int, Reason] = {}
    for chunk in chunks:
        if contents_like(chunk.text) or any(_LEADER.search(h) for h in chunk.heading_path):
            out[chunk.pk] = Reason.CONTENTS
    rest = [c for c in chunks if c.pk not in out]
    out |= dict.fromkeys(_repeated(rest), Reason.REPEATED)
    out |= dict.fromkeys(_aside([c for c in rest if c.pk not in out]), Reason.ASIDE)
    return out


def boilerplate_chunks(chunk_ids: Iterable[int]) -> set[int]:
    """The ids of the boilerplate among these chunks."""
    return set(boilerplate(chunk_ids))


# --- REPEATED


def _neighbours(cursor: Any, chunk_id: int, attachment_ids: list[int]) -> list[int]:
    """The chunks (other than this one) nearest to its first window among these files."""
    cursor.execute(
        "SELECT v.chunk_id FROM attachments_chunkvector v "
        "WHERE v.attachment_id = ANY(%s) AND v.chunk_id <> %s "
        "ORDER BY v.embedding <=> (SELECT embedding FROM attachments_chunkvector "
        '  WHERE chunk_id = %s ORDER BY "window" LIMIT 1) LIMIT %s',
        [attachment_ids, chunk_id, chunk_id, NEIGHBOURS],
    )
    return [int(row[0]) for row in cursor.fetchall()]


def _repeated(chunks: list[_Chunk]) -> set[int]:
    if not chunks:
        return set()
    files = {
        a.pk: a
        for a in NoteAttachment.objects.filter(
            pk__in={c.attachment_id for c in chunks}
        ).select_related("note__notebook")
    }
    owners = {a.note.notebook.owner_id for a in files.values()}
    library: dict[int, list[tuple[int, str]]] = defaultdict(list)  # owner → [(file, sha)]
    for pk, owner, sha in NoteAttachment.objects.filter(
        note__notebook__owner_id__in=owners, status=NoteAttachment.Status.READY
    ).values_list("pk", "note__notebook__owner_id", "sha256"):
        library[owner].append((pk, sha))
    found: dict[int, list[int]] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL hnsw.ef_search = {EF_SEARCH}")
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        for chunk in chunks:
            attachment = files[chunk.attachment_id]
            ids = [
                pk
                for pk, sha in library[attachment.note.notebook.owner_id]
                if sha != attachment.sha256 or pk == attachment.pk
            ]
            found[chunk.pk] = _neighbours(cursor, chunk.pk, ids or [attachment.pk])
        texts = _texts({pk for near in found.values() for pk in near})
        out: set[int] = set()
        for chunk in chunks:
            mine = shingles(chunk.text)
            pages: set[int] = set()
            for near in found[chunk.pk]:
                other = texts.get(near)
                if other is None or not _copy_of(mine, other.shingles):
                    continue
                if other.attachment_id != chunk.attachment_id:
                    if not _versions(cursor, chunk.attachment_id, other.attachment_id):
                        out.add(chunk.pk)
                        break
                elif other.page != chunk.page:
                    pages.add(other.page)
            if len(pages) >= REPEAT_PAGES:
                out.add(chunk.pk)
    return out


@dataclass
class _Text:
    attachment_id: int
    page: int
    shingles: set[tuple[str, ...]]


def _texts(chunk_ids: set[int]) -> dict[int, _Text]:
    rows = DocumentChunk.objects.filter(pk__in=chunk_ids).values_list(
        "pk", "attachment_id", "page_number", "content"
    )
    return {pk: _Text(a, page, shingles(text)) for pk, a, page, text in rows}


_VERSIONS: dict[tuple[int, int, int, int], bool] = {}


def _versions(cursor: Any, mine: int, other: int) -> bool:
    """Whether two files are versions of one document: a sample of one's passages spread
    over it mostly recurs in the other (cached per process while their chunks stay)."""
    counts = dict(
        NoteAttachment.objects.filter(pk__in=[mine, other]).values_list("pk", "chunk_count")
    )
    key = (mine, other, counts.get(mine, 0), counts.get(other, 0))
    if key not in _VERSIONS:
        step = max(1, counts.get(mine, 0) // VERSION_SAMPLE)
        sample = dict(
            DocumentChunk.objects.filter(attachment_id=mine)
            .alias(nth=Mod("index", step))
            .filter(nth=0)
            .order_by("index")
            .values_list("pk", "content")[:VERSION_SAMPLE]
        )
        near = {pk: _neighbours(cursor, pk, [other])[:3] for pk in sample}
        texts = _texts({n for ids in near.values() for n in ids})
        hits = sum(
            any(n in texts and _copy_of(shingles(sample[pk]), texts[n].shingles) for n in ids)
            for pk, ids in near.items()
        )
        if len(_VERSIONS) > 1000:
            _VERSIONS.clear()
        _VERSIONS[key] = hits >= max(2, VERSION_SHARE * len(sample))
    return _VERSIONS[key]


# --- ASIDE

_ASIDE: dict[tuple[int, str], set[int]] = {}


def _edge(page: int, pages: int) -> bool:
    edge = math.ceil(EDGE * pages)
    return page <= edge or page > pages - edge


def _aside(chunks: list[_Chunk]) -> set[int]:
    files = NoteAttachment.objects.filter(pk__in={c.attachment_id for c in chunks})
    off = set().union(*(_off_subject(attachment) for attachment in files))
    return {c.pk for c in chunks if c.pk in off}


def _off_subject(attachment: NoteAttachment) -> set[int]:
    """The file's front and back matter passages far off its subject (see the module's
    docstring), computed once per process while the file is unchanged."""
    key = (attachment.pk, attachment.updated_at.isoformat())
    if key in _ASIDE:
        return _ASIDE[key]
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH centre AS (SELECT avg(embedding) AS m FROM attachments_chunkvector "
            '  WHERE attachment_id = %s AND "window" = 0) '
            "SELECT c.id, c.page_number, c.heading_path ->> 0, 1 - (v.embedding <=> centre.m) "
            "FROM centre, attachments_chunkvector v JOIN attachments_documentchunk c "
            'ON c.id = v.chunk_id WHERE v.attachment_id = %s AND v."window" = 0',
            [attachment.pk, attachment.pk],
        )
        rows = cursor.fetchall()
    off: set[int] = set()
    pages = attachment.page_count or 0
    if len(rows) >= MIN_CHUNKS:
        similarities = [float(row[3]) for row in rows]
        median = statistics.median(similarities)
        scale = 1.4826 * statistics.median(abs(s - median) for s in similarities) or 1e-6
        sections: dict[str, list[tuple[int, bool]]] = defaultdict(list)
        for pk, page, section, similarity in rows:
            if _edge(page, pages):
                sections[section or ""].append((pk, (similarity - median) / scale < -OUTLIER))
        for section, members in sections.items():
            if section and 2 * sum(o for _, o in members) > len(members):
                off |= {pk for pk, _ in members}  # most of it is off: all of it is
            else:
                off |= {pk for pk, o in members if o}
    if len(_ASIDE) > 1000:
        _ASIDE.clear()
    _ASIDE[key] = off
    return off
