"""The layout of extracted pages: their lines with font size and weight, the document's body
size, and its running heads and footers (page numbers, "Chapter 7: Reading data from files" at
the top of each page of chapter 7), which chunks, snippets and embeddings leave out."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from attachments.pdf.extract import ExtractedPage

# Running heads and footers are looked for where they are printed: among the first or last
# EDGE_LINES lines of a page, never in a heading-sized font (the chapter title that opens a
# chapter is content, even where later pages repeat it as their running head).
EDGE_LINES = 3
MIN_RUNNING_PAGES = 3
MAX_RUNNING_CHARS = 100
HEADING_SIZE = 1.15  # × the body size: a heading by its size
SMALL_PRINT = 0.92  # × the body size: footnotes and captions, never headings
_PAGE_NUMBER = re.compile(r"\d{1,4}|[ivxlcdm]{1,7}|[IVXLCDM]{1,7}")
_ROMAN = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100, "d": 500, "m": 1000}
# What names a family of running heads whose titles vary: "Chapter 7:", "Appendix B:", "§3.5"
# (matched on the folded key, numbers already "#").
_RUNNING_LABEL = re.compile(
    r"^(?:(?P<word>[^\W\d_]+) (?:#|[^\W\d_]|[ivxlcdm]+)(?:\.#)*(?P<end>[:.])(?= )|§ ?#)"
)
_CODE = re.compile(r"[{}\\=]")  # a line of code (\end{tikzpicture}) is no running head
_SENTENCE_TAIL = re.compile(r"[.,;:，。；：]$")


@dataclass
class Segment:
    start: int
    end: int
    text: str
    size: float
    bold: bool
    standalone: bool  # alone in its text box (blank lines around it)


def segments(page: ExtractedPage) -> list[Segment]:
    """The page's non-blank lines with their style (size 0 where unknown: OCR)."""
    styles = {line.start: line for line in page.lines}
    text = page.text
    out: list[Segment] = []
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
            Segment(
                start,
                end,
                raw.strip(),
                style.size if style else 0.0,
                style.bold if style else False,
                before_blank and after_blank,
            )
        )
    return out


def body_size(pages: Sequence[ExtractedPage]) -> float:
    """The font size most of the document's text is set in (0 without styles)."""
    weights: Counter[float] = Counter()
    for page in pages:
        for line in page.lines:
            if line.size:
                weights[round(line.size * 2) / 2] += line.end - line.start
    return weights.most_common(1)[0][0] if weights else 0.0


@dataclass
class Boilerplate:
    """A document's running heads and footers, and the lines it repeats anywhere."""

    running: dict[int, list[tuple[int, int]]]  # page number → (start, end) of each such line
    running_keys: set[str]  # their running_key
    repeated: set[str]  # keys of short lines on MIN_RUNNING_PAGES pages or more, anywhere

    def starts(self, page: int) -> set[int]:
        return {start for start, _ in self.running.get(page, ())}


@dataclass(frozen=True)
class _EdgeLine:
    page: int
    top: bool  # else at the bottom
    seg: Segment
    key: str
    number: tuple[str, int] | None  # a bare page number: ("arabic" or "roman", value)


def running_key(text: str) -> str:
    """The line with its numbers as "#", whitespace folded and case folded."""
    return re.sub(r"\d+", "#", " ".join(text.split())).casefold()


def _page_number(text: str) -> tuple[str, int] | None:
    if not _PAGE_NUMBER.fullmatch(text):
        return None
    if text.isdigit():
        return "arabic", int(text)
    values = [_ROMAN[ch] for ch in text.lower()]
    return "roman", sum(-v if v < n else v for v, n in zip(values, [*values[1:], 0], strict=True))


def _running_label(key: str) -> str | None:
    match = _RUNNING_LABEL.match(key)
    if not match:
        return None
    return f"{match['word']} #{match['end']}" if match["word"] else "§"


def _edge_lines(number: int, segs: list[Segment], body: float) -> list[_EdgeLine]:
    """The lines of a page where running heads and footers are printed."""
    # Headings do not count: pdfminer may put one before the running head it follows.
    kept = [s for s in segs if not (body and s.size >= body * HEADING_SIZE)]
    out: list[_EdgeLine] = []
    for i, seg in enumerate(kept):
        top, bottom = i < EDGE_LINES, i >= len(kept) - EDGE_LINES
        if len(seg.text) > MAX_RUNNING_CHARS or _CODE.search(seg.text):
            continue
        key, value = running_key(seg.text), _page_number(seg.text)
        if value or any(ch.isalpha() for ch in key):
            out += [_EdgeLine(number, True, seg, key, value)] if top else []
            out += [_EdgeLine(number, False, seg, key, value)] if bottom else []
    return out


def find_boilerplate(pages: Sequence[ExtractedPage]) -> Boilerplate:
    """Running heads and footers: lines among the first or last EDGE_LINES of a page, not in a
    heading-sized font (a chapter's title is content where it opens the chapter), that are

    - page numbers: bare numbers, arabic or roman, that follow the physical page number at
      a fixed offset on MIN_RUNNING_PAGES pages or more (a table's numbers do not);
    - repeated: the same line, numbers aside, at the same edge of MIN_RUNNING_PAGES pages or
      more ("Chapter 7: Reading data from files 35" on each page of the chapter, a book's
      title on every even page);
    - of a family: a label such as "Chapter N:" or "§N.N" at the same edge of
      MIN_RUNNING_PAGES pages or more, at least half of them lines printed on two pages or
      more (the head of a one-page chapter or section);
    - beside a page number: in a document with running heads, one of the first two lines of
      a page that has none, the other being a page number in the same font size
      ("Acknowledgements" above "2").
    """
    body = body_size(pages)
    lines = {page.number: segments(page) for page in pages}
    edges = [e for n, segs in lines.items() for e in _edge_lines(n, segs, body)]
    found: dict[tuple[int, int], _EdgeLine] = {}  # (page number, line start) → the line

    sequences: dict[tuple[str, int], set[int]] = defaultdict(set)
    for e in edges:
        if e.number:
            sequences[e.number[0], e.number[1] - e.page].add(e.page)
    numbers = [
        e
        for e in edges
        if e.number and len(sequences[e.number[0], e.number[1] - e.page]) >= MIN_RUNNING_PAGES
    ]
    found.update(((e.page, e.seg.start), e) for e in numbers)

    texts = [e for e in edges if not e.number]
    on_pages: dict[tuple[bool, str], set[int]] = defaultdict(set)
    for e in texts:
        on_pages[e.top, e.key].add(e.page)
    repeated = {k for k, where in on_pages.items() if len(where) >= MIN_RUNNING_PAGES}
    members: dict[tuple[bool, str], set[int]] = defaultdict(set)
    confirmed: dict[tuple[bool, str], set[int]] = defaultdict(set)
    for e in texts:
        if label := _running_label(e.key):
            members[e.top, label].add(e.page)
            if len(on_pages[e.top, e.key]) >= 2:
                confirmed[e.top, label].add(e.page)
    families = {
        f for f, ok in confirmed.items() if len(ok) >= max(MIN_RUNNING_PAGES, len(members[f]) / 2)
    }
    headed: set[int] = set()  # pages with a running head at the top
    for e in texts:
        label = _running_label(e.key)
        if (e.top, e.key) in repeated or (label and (e.top, label) in families):
            found[e.page, e.seg.start] = e
            if e.top:
                headed.add(e.page)

    if len(headed) >= MIN_RUNNING_PAGES:
        beside = {(e.page, e.seg.start): e for e in texts if e.top}
        for n in numbers:
            first_two = lines[n.page][:2]
            if len(first_two) < 2 or n.seg not in first_two or not n.top or n.page in headed:
                continue
            neighbour = first_two[1] if first_two[0] is n.seg else first_two[0]
            other = beside.get((n.page, neighbour.start))
            if (
                other
                and n.seg.size  # sizes known: not OCR
                and abs(other.seg.size - n.seg.size) <= 0.05 * n.seg.size
                and len(other.seg.text) <= 60
                and not _SENTENCE_TAIL.search(other.seg.text)
            ):
                found[n.page, other.seg.start] = other

    running: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for (number, _), e in sorted(found.items()):
        running[number].append((e.seg.start, e.seg.end))
    counts: Counter[str] = Counter()
    for segs in lines.values():
        counts.update({running_key(s.text) for s in segs if len(s.text) <= MAX_RUNNING_CHARS})
    return Boilerplate(
        running=dict(running),
        running_keys={e.key for e in found.values()},
        repeated={key for key, n in counts.items() if n >= MIN_RUNNING_PAGES},
    )
