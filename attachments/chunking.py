"""Heading-aware chunking of extracted pages.

Chunks never cross a page, aim for TARGET_MIN..TARGET_MAX characters, overlap by about
OVERLAP characters when a section has to be cut, keep small tables whole, and remember
their character offsets in the page text (so a quoted sentence can be found again) and the
heading path they sit under (e.g. ["5 Arrays and matrices", "5.1 Arrays"]).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from attachments.pdf.extract import ExtractedPage
from notebook.textutil import estimate_tokens

TARGET_MIN = 800
TARGET_MAX = 1500
OVERLAP = 200
# At a heading, a chunk this short is continued rather than closed (no "heading only" chunks).
MIN_BEFORE_HEADING = 300
MAX_HEADING_CHARS = 120
MAX_LEVELS = 4

_NUMBERED = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){0,3})\.?\s+(\S.*)$")
_NAMED = re.compile(
    r"^(chapter|section|part|appendix|kapitel|abschnitt|teil|anhang)\s+[\w.]+\b"
    r"|^第\s*[一二三四五六七八九十百千\d]+\s*[章节部篇]",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n")
_TABLE_GAP = re.compile(r"\S(\s{2,}|\t|\s\|\s)\S")


@dataclass
class Block:
    start: int
    end: int
    heading_level: int | None = None  # None: body text
    is_table: bool = False


@dataclass
class Chunk:
    page_number: int
    start: int
    end: int
    content: str
    heading_path: list[str] = field(default_factory=list)
    is_table: bool = False

    @property
    def token_count(self) -> int:
        return estimate_tokens(self.content)


@dataclass
class _Segment:
    start: int
    end: int
    text: str
    size: float
    bold: bool
    standalone: bool  # alone in its text box (blank lines around it)


def _segments(page: ExtractedPage) -> list[_Segment]:
    styles = {line.start: line for line in page.lines}
    text = page.text
    out: list[_Segment] = []
    pos = 0
    for raw in text.split("\n"):
        start, end = pos, pos + len(raw)
        pos = end + 1
        if not raw.strip():
            continue
        style = styles.get(start)
        before_blank = start == 0 or text[max(0, start - 2) : start] == "\n\n"
        after_blank = end >= len(text) or text[end : end + 2] == "\n\n"
        out.append(
            _Segment(
                start,
                end,
                raw.strip(),
                style.size if style else 0.0,
                style.bold if style else False,
                before_blank and after_blank,
            )
        )
    return out


def _boilerplate(pages: Sequence[ExtractedPage]) -> set[str]:
    """Running heads and footers: short lines repeated on many pages (digits ignored)."""
    counts: Counter[str] = Counter()
    for page in pages:
        seen = {re.sub(r"\d+", "#", s.text) for s in _segments(page) if len(s.text) <= 100}
        counts.update(seen)
    # A real heading is printed once; a line on three or more pages is a running head or foot.
    return {text for text, n in counts.items() if n >= 3}


def _body_size(pages: Sequence[ExtractedPage]) -> float:
    weights: Counter[float] = Counter()
    for page in pages:
        for line in page.lines:
            if line.size:
                weights[round(line.size * 2) / 2] += line.end - line.start
    return weights.most_common(1)[0][0] if weights else 0.0


_TOC_LEADER = re.compile(r"(\.\s?){3,}\s*\w+$")


def _looks_like_heading_text(text: str) -> bool:
    return (
        2 <= len(text) <= MAX_HEADING_CHARS
        and any(ch.isalpha() for ch in text)
        and not text.endswith((",", ";", "-", "。", "，"))
        and "，" not in text
        and not _TOC_LEADER.search(text)  # a table-of-contents entry, not the heading itself
    )


def classify_headings(pages: Sequence[ExtractedPage]) -> dict[tuple[int, int], int]:
    """Map (page number, line start) to a heading level (1 = top) for lines that are headings.

    Font size above the body size decides first (bigger = higher level); then bold short
    lines; then, for lines alone in their box, numbering ("2.1 Methods"), names ("Chapter 3")
    and ALL-CAPS lines.
    """
    body = _body_size(pages)
    boiler = _boilerplate(pages)
    big_sizes: set[float] = set()
    candidates: list[tuple[int, _Segment]] = []
    for page in pages:
        for seg in _segments(page):
            if not _looks_like_heading_text(seg.text):
                continue
            if re.sub(r"\d+", "#", seg.text) in boiler:
                continue
            candidates.append((page.number, seg))
            if body and seg.size >= body * 1.15:
                big_sizes.add(round(seg.size * 2) / 2)
    ranks = {size: i + 1 for i, size in enumerate(sorted(big_sizes, reverse=True)[:MAX_LEVELS])}
    lowest = min(len(ranks) + 1, MAX_LEVELS)
    levels: dict[tuple[int, int], int] = {}
    for number, seg in candidates:
        size_key = round(seg.size * 2) / 2
        level: int | None = None
        if size_key in ranks:
            level = ranks[size_key]
        elif seg.bold and len(seg.text) <= 80 and not seg.text.endswith("."):
            level = lowest
        elif seg.standalone and len(seg.text) <= 80:
            numbered = _NUMBERED.match(seg.text)
            if (
                numbered
                and (numbered.group(2)[0].isupper() or not numbered.group(2)[0].isascii())
                and not re.search(r"[。；：.;:]\S", numbered.group(2))  # a list item with sentences
            ):
                level = min(numbered.group(1).count(".") + 1, MAX_LEVELS)
            elif _NAMED.match(seg.text):
                level = 1
            elif (
                seg.text.isupper()
                and sum(ch.isalpha() for ch in seg.text) >= 4
                and len(seg.text) <= 60
            ):
                level = lowest
        if level is not None:
            levels[(number, seg.start)] = level
    return levels


def _blocks(page: ExtractedPage, levels: dict[tuple[int, int], int]) -> list[Block]:
    """Paragraphs (text boxes) and headings of one page, in reading order."""
    blocks: list[Block] = []
    current: Block | None = None
    table_lines = 0
    lines_in_block = 0
    text = page.text
    for seg in _segments(page):
        level = levels.get((page.number, seg.start))
        new_box = current is None or text[current.end : seg.start].count("\n") >= 2
        if level is not None or new_box:
            if current is not None:
                current.is_table = lines_in_block >= 3 and table_lines * 3 >= lines_in_block * 2
                blocks.append(current)
            if level is not None:
                blocks.append(Block(seg.start, seg.end, heading_level=level))
                current = None
                table_lines = lines_in_block = 0
                continue
            current = Block(seg.start, seg.end)
            table_lines = lines_in_block = 0
        else:
            assert current is not None
            current.end = seg.end
        lines_in_block += 1
        table_lines += bool(_TABLE_GAP.search(seg.text))
    if current is not None:
        current.is_table = lines_in_block >= 3 and table_lines * 3 >= lines_in_block * 2
        blocks.append(current)
    return blocks


def _cut_point(text: str, lo: int, hi: int) -> int:
    """The best place to end a piece in text[lo:hi]: the last sentence or line end, else the
    last space, else hi."""
    window = text[lo:hi]
    best = -1
    for match in _SENTENCE_END.finditer(window):
        best = match.start()
    if best > (hi - lo) // 3:
        return lo + best
    space = window.rfind(" ")
    return lo + space if space > (hi - lo) // 3 else hi


def _overlap_start(text: str, start: int, end: int) -> int:
    """Where the next piece starts so it repeats about OVERLAP characters of text[start:end]."""
    target = max(start, end - OVERLAP)
    window = text[target:end]
    match = _SENTENCE_END.search(window)
    if match and match.end() < len(window):
        return target + match.end()
    space = window.find(" ")
    return target + space + 1 if 0 <= space < len(window) - 1 else target


def _split_long(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Cut text[start:end] into pieces of at most TARGET_MAX characters with overlap."""
    pieces: list[tuple[int, int]] = []
    pos = start
    while end - pos > TARGET_MAX:
        cut = _cut_point(text, pos + TARGET_MIN, pos + TARGET_MAX)
        pieces.append((pos, cut))
        nxt = _overlap_start(text, pos, cut)
        pos = nxt if nxt > pos else cut
    pieces.append((pos, end))
    return pieces


def _emit(
    chunks: list[Chunk], page: ExtractedPage, start: int, end: int, path: list[str], table: bool
) -> None:
    whole = table and end - start <= TARGET_MAX  # a chunk holding a small table is not cut
    pieces = [(start, end)] if whole else _split_long(page.text, start, end)
    for a, b in pieces:
        a, b = _trim(page.text, a, b)
        if b > a:
            chunks.append(Chunk(page.number, a, b, page.text[a:b], list(path), table))


def chunk_pages(pages: Sequence[ExtractedPage]) -> list[Chunk]:
    """Chunks for a whole document, in page order (see the module docstring)."""
    levels = classify_headings(pages)
    path: list[tuple[int, str]] = []  # (level, heading text), outermost first; spans pages
    chunks: list[Chunk] = []
    for page in pages:
        text = page.text
        start: int | None = None  # the open chunk, text[start:end]
        end = 0
        cur_path: list[str] = []
        table = False
        for block in _blocks(page, levels):
            headings = [t for _, t in path]
            if block.heading_level is not None:
                if start is not None and end - start >= MIN_BEFORE_HEADING:
                    _emit(chunks, page, start, end, cur_path, table)
                    start = None
                path = [(lvl, t) for lvl, t in path if lvl < block.heading_level]
                path.append((block.heading_level, text[block.start : block.end].strip()))
                if start is None:
                    start, end, table = block.start, block.end, False
                    cur_path = [t for _, t in path]
                else:
                    end = block.end
                continue
            if start is None:
                start, end, table, cur_path = block.start, block.end, block.is_table, headings
            elif block.is_table and block.end - block.start <= TARGET_MAX < block.end - start:
                # A small table is never cut: it starts a chunk of its own.
                _emit(chunks, page, start, end, cur_path, table)
                start, end, table, cur_path = block.start, block.end, True, headings
            elif block.end - start <= TARGET_MAX or end - start < TARGET_MIN:
                end = block.end
                table = table or block.is_table
            else:
                _emit(chunks, page, start, end, cur_path, table)
                start, end = _overlap_start(text, start, end), block.end
                table, cur_path = False, headings
        if start is not None:
            _emit(chunks, page, start, end, cur_path, table)
    return chunks


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
