"""Heading-aware chunking of extracted pages.

Chunks never cross a page, aim for TARGET_MIN..TARGET_MAX characters, overlap by about
OVERLAP characters when a section has to be cut, keep small tables whole, leave out running
heads and footers (attachments.pdf.layout), and remember their character offsets in the page
text (so a quoted sentence can be found again) and the heading path they sit under (e.g.
["5 Arrays and matrices", "5.1 Arrays"]).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from attachments.pdf.extract import ExtractedPage
from attachments.pdf.layout import (
    HEADING_SIZE,
    SMALL_PRINT,
    Boilerplate,
    Segment,
    body_size,
    find_boilerplate,
    running_key,
    segments,
)
from core.textutil import estimate_tokens

TARGET_MIN = 800
TARGET_MAX = 1500
OVERLAP = 200
# At a heading, a chunk this short is continued rather than closed (no "heading only" chunks).
MIN_BEFORE_HEADING = 300
MAX_HEADING_CHARS = 120
MAX_LEVELS = 4
SAME_SIZE = 0.95  # a heading size this close to a larger one is the same level

_NUMBERED = re.compile(r"^(\d{1,2}(?:\.\d{1,2}){0,3})\.?\s+(\S.*)$")
_NAMED = re.compile(
    r"^(chapter|section|part|appendix|kapitel|abschnitt|teil|anhang)\s+[\w.]+\b"
    r"|^第\s*[一二三四五六七八九十百千\d]+\s*[章节部篇]",
    re.IGNORECASE,
)
# Punctuation inside a line that runs on into more text: a sentence, not a title.
_SENTENCES = re.compile(r"[。；：.;:]\S")
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n")
_TABLE_GAP = re.compile(r"\S(\s{2,}|\t|\s\|\s)\S")


@dataclass
class Block:
    start: int
    end: int
    heading_level: int | None = None  # None: body text
    is_table: bool = False
    running: bool = False  # a running head or footer: in no chunk


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


_TOC_LEADER = re.compile(r"(\.\s?){3,}\s*\w+$")
# List items are never headings: bullets, "(a)", "a)", "(iv)", "3)", "b. ".
_LIST_ITEM = re.compile(
    r"^(?:[•·▪▫◦‣∙●○■□►▸➢✓✔–—*-]\s?|\(?[A-Za-z]\)\s|\([ivxIVX]{1,4}\)\s|\(?\d{1,2}\)\s|[a-z]\.\s)"
)
_WORD = re.compile(r"[^\W\d_]{2,}")
_VOWEL = re.compile(r"[aeiouyAEIOUY]")
# "1. Install the package": a list item, unless its size or weight make it a heading.
_ENUMERATED = re.compile(r"^\d{1,2}\.\s")


def _readable(text: str) -> bool:
    """Words, not glyphs of a music or symbol font ("hhhh", "(cid:26) c", "PNhh")."""
    if "(cid:" in text:
        return False
    return bool(_NUMBERED.match(text)) or any(
        not word.isascii() or _VOWEL.search(word) or (word.isupper() and len(word) >= 3)
        for word in _WORD.findall(text)
    )


def _looks_like_heading_text(text: str) -> bool:
    return (
        2 <= len(text) <= MAX_HEADING_CHARS
        and _readable(text)
        and not text.endswith((",", ";", "-", "。", "，"))
        and "，" not in text
        and not _TOC_LEADER.search(text)  # a table-of-contents entry, not the heading itself
        and not _LIST_ITEM.match(text)
    )


def _numbered_level(text: str) -> int | None:
    """The level of a numbered heading ("5.2 Changing linebreaks": 2), None for a list item
    ("1. Install the package"), a footnote ("1 See the on-line help for autoload.") or a
    formula."""
    numbered = _NUMBERED.match(text)
    if not numbered:
        return None
    title = numbered.group(2)
    if _ENUMERATED.match(text) and not (title.isupper() and len(title) >= 4):
        return None  # but "8. TRANSLATION" is a section of a license
    if not (title[0].isupper() or (title[0].isalpha() and not title[0].isascii())):
        return None
    if _SENTENCES.search(title):  # a list item with sentences
        return None
    if title.endswith(".") and len(title.split()) >= 4:  # a sentence: a footnote
        return None
    return min(numbered.group(1).count(".") + 1, MAX_LEVELS)


def _size_ranks(sizes: Counter[float]) -> dict[float, int]:
    """Heading level (1 = largest) of each heading size (with how many lines have it). Sizes
    within SAME_SIZE of a larger one share its level (20.7 and 20.2 points: both chapters); at
    most MAX_LEVELS levels, and when there would be more, sizes of one line only (a font
    demonstration, a title page) make none."""

    def levels(candidates: set[float]) -> dict[float, int]:
        out: dict[float, int] = {}
        level, top = 0, 0.0
        for size in sorted(candidates, reverse=True):
            if not level or size < top * SAME_SIZE:
                level, top = level + 1, size
            out[size] = level
        return out

    ranks = levels(set(sizes))
    if max(ranks.values(), default=0) > MAX_LEVELS:
        ranks = levels({size for size, n in sizes.items() if n > 1} or set(sizes))
    return {size: level for size, level in ranks.items() if level <= MAX_LEVELS}


def classify_headings(
    pages: Sequence[ExtractedPage], boilerplate: Boilerplate | None = None
) -> dict[tuple[int, int], int]:
    """Map (page number, line start) to a heading level (1 = top) for lines that are headings.

    Font size above the body size decides first (bigger = higher level); then bold short
    lines; then, for lines alone in their box, numbering ("2.1 Methods"), names ("Chapter 3")
    and ALL-CAPS lines. Never headings: running heads and footers, lines repeated on many
    pages (unless a heading-sized one a running head repeats), small print (footnotes), list
    items.
    """
    body = body_size(pages)
    boiler = boilerplate or find_boilerplate(pages)
    big_sizes: Counter[float] = Counter()
    candidates: list[tuple[int, Segment]] = []
    for page in pages:
        running = boiler.starts(page.number)
        for seg in segments(page):
            if seg.start in running or not _looks_like_heading_text(seg.text):
                continue
            big = bool(body) and seg.size >= body * HEADING_SIZE
            key = running_key(seg.text)
            if key in boiler.repeated and not (big and key in boiler.running_keys):
                continue
            if body and seg.size and seg.size < body * SMALL_PRINT:
                continue
            candidates.append((page.number, seg))
            if big:
                big_sizes[round(seg.size * 2) / 2] += 1
    ranks = _size_ranks(big_sizes)
    lowest = min(max(ranks.values(), default=0) + 1, MAX_LEVELS)
    levels: dict[tuple[int, int], int] = {}
    for number, seg in candidates:
        size_key = round(seg.size * 2) / 2
        level: int | None = None
        if size_key in ranks:
            level = ranks[size_key]
        elif seg.bold and len(seg.text) <= 80 and not seg.text.endswith("."):
            level = lowest
        elif seg.standalone and len(seg.text) <= 80:
            if _NUMBERED.match(seg.text) and (depth := _numbered_level(seg.text)):
                # Below the levels sizes make: "2.1" in body size under "2" in a larger one.
                level = min(depth + max(ranks.values(), default=1) - 1, MAX_LEVELS)
            elif (
                (named := _NAMED.match(seg.text))
                # Where headings have their sizes, a chapter's name is in one of them.
                and not (ranks and seg.size)
                and not _SENTENCES.search(seg.text[named.end() :])
            ):
                level = 1
            elif (
                all(ch.isupper() for ch in seg.text if ch.isalpha())  # "LATEX 的…": no caps
                and sum(ch.isalpha() for ch in seg.text) >= 4
                and len(seg.text) <= 60
            ):
                level = lowest
        if level is not None:
            levels[(number, seg.start)] = level
    return levels


def _blocks(
    page: ExtractedPage, levels: dict[tuple[int, int], int], running: set[int]
) -> list[Block]:
    """Paragraphs (text boxes), headings and running heads of one page, in reading order."""
    blocks: list[Block] = []
    current: Block | None = None
    table_lines = 0
    lines_in_block = 0
    text = page.text
    for seg in segments(page):
        level = levels.get((page.number, seg.start))
        if seg.start in running:
            level = None
        elif (
            level is not None
            and current is None
            and blocks
            and blocks[-1].heading_level == level
            and text[blocks[-1].end : seg.start] == "\n"
            and not (_NUMBERED.match(seg.text) or _NAMED.match(seg.text))
        ):
            blocks[-1].end = seg.end  # a heading wrapped onto a second line
            continue
        new_box = current is None or text[current.end : seg.start].count("\n") >= 2
        if level is not None or new_box or seg.start in running:
            if current is not None:
                current.is_table = lines_in_block >= 3 and table_lines * 3 >= lines_in_block * 2
                blocks.append(current)
            if level is not None or seg.start in running:
                blocks.append(
                    Block(seg.start, seg.end, heading_level=level, running=seg.start in running)
                )
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


def chunk_pages(
    pages: Sequence[ExtractedPage], boilerplate: Boilerplate | None = None
) -> list[Chunk]:
    """Chunks for a whole document, in page order (see the module docstring)."""
    boiler = boilerplate or find_boilerplate(pages)
    levels = classify_headings(pages, boiler)
    path: list[tuple[int, str]] = []  # (level, heading text), outermost first; spans pages
    chunks: list[Chunk] = []
    for page in pages:
        text = page.text
        start: int | None = None  # the open chunk, text[start:end]
        end = 0
        cur_path: list[str] = []
        table = False
        for block in _blocks(page, levels, boiler.starts(page.number)):
            headings = [t for _, t in path]
            if block.running:
                # The open chunk ends before a running head or footer and the next starts
                # after it: chunks stay substrings of the page, without the head.
                if start is not None:
                    _emit(chunks, page, start, end, cur_path, table)
                start = None
                continue
            if block.heading_level is not None:
                if start is not None and end - start >= MIN_BEFORE_HEADING:
                    _emit(chunks, page, start, end, cur_path, table)
                    start = None
                path = [(lvl, t) for lvl, t in path if lvl < block.heading_level]
                path.append((block.heading_level, " ".join(text[block.start : block.end].split())))
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


def provisional_chunks(pages: Sequence[ExtractedPage]) -> list[Chunk]:
    """The first pass's passages: each page's plain text cut into pieces of at most
    TARGET_MAX characters (with overlap), no headings, no running heads left out; enough for
    keyword search until the structured pass replaces them."""
    chunks: list[Chunk] = []
    for page in pages:
        start, end = _trim(page.text, 0, len(page.text))
        if end > start:
            _emit(chunks, page, start, end, [], table=False)
    return chunks
