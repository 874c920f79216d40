"""One coherent passage of a page: the unit that holds a sentence, and how it is shown.

The offline answerer's best sentence is grown to the unit of its page that holds it: the
page's text is cut into blocks at blank lines (as extraction writes paragraphs, code
examples and lists), and the block holding the sentence is the answer, with what belongs to
it by the page's own structure: a lead-in that ends in a colon and the code or list it
introduces, a heading line and the paragraph under it, a sentence the layout carried on into
the next block (it goes on in lower case). A block too long to show whole is cut to the
sentences around the best one. Only layout is read here (blank lines, line starts, the share
of symbols in a line, closing punctuation), never words of a language.

`render` writes the unit as Markdown with its structure: prose as paragraphs (lines joined,
words cut at line ends whole), list items as a list, code and tables as a fenced block, every
character of the source shown as it is (escaped). The sentences that answer are the unit's
`quote`, which the page highlights (chat.rendering) and the citation verifies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attachments.models import DocumentChunk, DocumentPage
from core.textutil import unhyphenated
from grounding.citations import normalise, quotable
from grounding.evidence import readable, sentences

if TYPE_CHECKING:
    from grounding.evidence import Candidate, Evidence

MAX_UNIT_CHARS = 1400  # a unit longer than this is cut to sentences around the best one
WINDOW_CHARS = 700  # what such a cut keeps
MAX_BLOCKS = 12
HIGHLIGHT_SHARE = 0.85  # a neighbour of the best sentence scoring this share of it answers too
MAX_HIGHLIGHT = 3

PROSE, CODE, LIST, HEADING, DEBRIS = "prose", "code", "list", "heading", "debris"
# A list item opens with a bullet, a dash, or a number or letter and a bracket or stop.
_BULLET = re.compile(r"^\s*(?:[•●○◦▪▫‣∙·*–—-]|\(?\d{1,2}[.)]|\(?[a-z][.)]|\([ivx]+\))\s+")
_NUMBERED = re.compile(r"^\s*\d+(?:\.\d+)*\.?\s+\S")  # "2. Header line", "5.7.1 Matrix …"
_SYMBOL_BULLET = re.compile(r"^\s*[•●○◦▪▫‣∙·*–—-]\s+")
_SYMBOL_BULLET_INSIDE = re.compile(r"(?:^|\s)[•●○◦▪▫‣∙·]\s+")
# Characters that are rare in running text of any script and common in code.
_SYMBOLS = re.compile(r"[(){}\[\]=<>;$\\_\"'#%&|^~@+*/`]")
_PROMPT = re.compile(r"^\s*(?:>|\$|#|%|>>>|\+)\s")
_ENDS_SENTENCE = re.compile(r"[.!?。！？…][\"'”’)\]]*\s*$")


@dataclass
class Block:
    kind: str
    text: str  # as the page has it (lines kept)
    following_page: bool = False  # carried over from the top of the next page

    @property
    def lines(self) -> list[str]:
        return [line for line in self.text.splitlines() if line.strip()]


@dataclass
class Unit:
    n: int  # the citation number of its passage
    passage: dict[str, Any]
    blocks: list[Block]
    quote: str  # the sentences that answer, contiguous, verbatim (whitespace collapsed)
    text: str = field(default="")  # the unit's text, whitespace collapsed (what it holds)
    last_page: int | None = None  # the next page's number when the unit goes on there


def kind_of(text: str, emphasis: bool | None = None) -> str:
    """Whether a block of a page is prose, a list, code (or a table) or a heading line, read
    from its layout alone. `emphasis`: whether its font is larger or bolder than the page's
    running text (None: not known); a heading line is set apart so when it is known."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return PROSE
    if len(lines) == 1 and _debris(lines[0]):
        return DEBRIS
    line = lines[0]
    if _heading_line(lines, emphasis):
        return HEADING
    if _BULLET.match(line):
        return LIST
    if sum(bool(_PROMPT.match(line)) for line in lines) * 2 >= len(lines) or _code_like(lines):
        return CODE
    return PROSE


def _heading_line(lines: list[str], emphasis: bool | None) -> bool:
    """One short line that does not end like a sentence or a lead-in, opens in neither lower
    case nor a bullet nor a prompt, and is set apart by its font (or numbered)."""
    line = lines[0]
    return (
        len(lines) == 1 and len(line.split()) <= 10 and len(line) < 90
        and not _SYMBOL_BULLET.match(line) and not line.lstrip()[:1].islower()
        and not _PROMPT.match(line) and (emphasis is not False or bool(_NUMBERED.match(line)))
        and not _ENDS_SENTENCE.search(line) and not line.rstrip().endswith((":", ",", ";"))
        and (not _code_like(lines) or (line.lstrip()[:1].isalnum() and " " in line.strip()))
    )  # fmt: skip


def _code_like(lines: list[str]) -> bool:
    """Lines dense in symbols that do not end like sentences: code, a command, a table."""
    dense = 0
    for line in lines:
        chars = len(line.replace(" ", "")) or 1
        symbols = len(_SYMBOLS.findall(line)) / chars
        letters = sum(ch.isalpha() for ch in line) / chars
        if (symbols >= 0.12 or letters < 0.5) and not _ENDS_SENTENCE.search(line):
            dense += 1
    return dense * 3 >= len(lines) * 2


def blocks_of(text: str) -> list[tuple[int, int]]:
    """(start, end) of each block of a page's text: runs of lines between blank lines."""
    out, start = [], 0
    for match in re.finditer(r"\n[ \t]*\n", text):
        if text[start : match.start()].strip():
            out.append((start, match.start()))
        start = match.end()
    if text[start:].strip():
        out.append((start, len(text)))
    return out


def _flat(text: str) -> str:
    return normalise(unhyphenated(text))


def _page_text(passage: dict[str, Any]) -> tuple[str, int, list[Any]]:
    """The text of the passage's whole page (a note's plain text) and where the passage
    starts in it."""
    if passage.get("kind") != "document":  # a note's plain text has a line per block
        lines = [line for line in readable(passage).splitlines() if line.strip()]
        if lines and lines[0] == passage.get("note_title"):  # the frame names the note
            lines = lines[1:]
        return "\n\n".join(lines), 0, []
    chunk = (
        DocumentChunk.objects.filter(pk=int(passage.get("chunk_id") or 0))
        .values_list("attachment_id", "page_number", "start_char")
        .first()
    )
    if chunk is None:
        return str(passage.get("text", "")), 0, []
    page, lines = _page(chunk[0], chunk[1])
    if not page:
        return str(passage.get("text", "")), 0, []
    return page, chunk[2], lines


def _page(attachment_id: int, number: int) -> tuple[str, list[Any]]:
    """A page's text with its running heads and page numbers blanked (offsets kept: they are
    in no passage), and its lines' fonts; ("", []) when there is no such page."""
    row = (
        DocumentPage.objects.filter(attachment_id=attachment_id, number=number)
        .values_list("text", "running", "lines")
        .first()
    )
    if not row or not row[0]:
        return "", []
    page = row[0]
    for start, end in row[1] or []:
        page = page[:start] + re.sub(r"\S", " ", page[start:end]) + page[end:]
    return page, list(row[2] or [])


def _blocks(page: str, lines: list[Any]) -> list[Block]:
    return [Block(kind_of(page[s:e], _emphasis(lines, s, e)), _without_debris(page[s:e]))
            for s, e in blocks_of(page) if page[s:e].strip()]  # fmt: skip


def _carried_over(passage: dict[str, Any], blocks: list[Block]) -> list[Block]:
    """The blocks at the top of the page after the passage's that go on from the foot of its
    page: a sentence, a list or the prose after a code example the page break cut (margin
    words at either edge aside). Empty when the next page starts afresh."""
    if passage.get("kind") != "document" or not passage.get("attachment_id"):
        return []
    if passage.get("where"):  # a slide, sheet range, section or time, not a printed page
        return []
    try:
        number = int(passage.get("page") or 0)
    except (TypeError, ValueError):
        return []
    foot = next((b for b in reversed(blocks) if b.kind != DEBRIS), None)
    if not number or foot is None or foot.kind == HEADING:
        return []
    page, lines = _page(int(passage["attachment_id"]), number + 1)
    following = [b for b in _blocks(page, lines) if b.kind != DEBRIS]
    if not following or following[0].kind == HEADING or not _joins(foot, following[0]):
        return []
    return [Block(b.kind, b.text, following_page=True) for b in following]


def grow(best: Candidate | None, evidence: Evidence, passages: list[dict[str, Any]]) -> Unit | None:
    """The unit of its page that holds the best sentence, or None without one."""
    if best is None:
        return None
    passage = next((p for p in passages if int(p["n"]) == best.n), None)
    if passage is None:
        return None
    page, offset, lines = _page_text(passage)
    spans = [span for span in blocks_of(page) if page[span[0] : span[1]].strip()]
    # The block holding the sentence: the first from the passage's start on whose text (words
    # cut at line ends whole, whitespace collapsed) contains it.
    # Where the sentence is: in the page's blocks read as one text (a sentence the layout
    # spread over blocks spans them), from the passage's start on.
    flat = [_flat(page[start:end]) for start, end in spans]
    starts, joined = [], ""
    for piece in flat:
        starts.append(len(joined))
        joined += piece + " "
    begin = next((i for i, (s, e) in enumerate(spans) if e > offset), 0)
    found_at = joined.find(best.text, starts[begin] if starts else 0)
    if found_at < 0:
        found_at = joined.find(best.text)
    at = end_at = None
    if found_at >= 0:
        at = max(i for i, start in enumerate(starts) if start <= found_at)
        end = found_at + len(best.text) - 1
        end_at = max(i for i, start in enumerate(starts) if start <= end)
    # Every sentence weighed, by its text: passages overlap, the same words come from several.
    scores: dict[str, float] = {}
    for c in evidence.ranked:
        scores[c.text] = max(scores.get(c.text, 0.0), c.score)
    if at is None:  # not found on the page as cut: the sentence alone
        return Unit(best.n, passage, [Block(PROSE, best.text)], best.text, best.text)
    blocks = _blocks(page, lines)
    first, last = _extent(blocks, at)
    last = max(last, _extent(blocks, end_at or at)[1])
    if last == len(blocks) - 1 or all(b.kind == DEBRIS for b in blocks[last + 1 :]):
        # It runs to the foot of the page: it goes on where the next page carries it on.
        carried = _carried_over(passage, blocks[: last + 1])
        if carried:
            blocks = blocks[: last + 1] + carried
            last = _extent(blocks, last)[1]
    # The unit next to it comes too when it holds a sentence that answers about as well
    # ("… the so-called Not a Number, NaN, values." and then "is.nan(xx) is only TRUE for NaNs.").
    floor = best.score * HIGHLIGHT_SHARE
    if last + 1 < len(blocks) and blocks[last + 1].kind != HEADING:
        _, near_last = _extent(blocks, last + 1)
        found = sentences(" ".join(b.text for b in blocks[last + 1 : near_last + 1]), 1, 0.0)
        if any(scores.get(s, 0.0) >= floor for s in found):
            last = near_last
    chosen = _fit(blocks, first, last, at)
    if chosen is None:
        chosen = [_window(blocks[at], best, scores)]
    elif chosen[0].kind == PROSE and chosen[0].text.lstrip()[:1].islower():
        # It goes on from the page before: start at its first whole sentence.
        found = sentences(chosen[0].text, 1, 0.0)
        if len(found) > 1 and best.text not in found[0]:
            chosen[0] = Block(PROSE, " ".join(found[1:]))
    quote = _quote([b for b in chosen if not b.following_page], best, scores, page)
    text = " ".join(_flat(b.text) for b in chosen)
    unit = Unit(best.n, passage, chosen, quote, text)
    if any(b.following_page for b in chosen):
        unit.last_page = int(passage.get("page") or 0) + 1
    return unit


def _emphasis(lines: list[Any], start: int, end: int) -> bool | None:
    """Whether the page's lines in start..end are set larger or bolder than most of the page
    (None when the page kept no font of its lines: OCR, or extracted before they were kept)."""
    sizes = [line[2] for line in lines if len(line) >= 4]
    if not sizes:
        return None
    body = sorted(sizes)[len(sizes) // 2]
    inside = [line for line in lines if len(line) >= 4 and line[0] < end and line[1] > start]
    return bool(inside) and all(line[3] or line[2] > body * 1.05 for line in inside)


def _joins(a: Block, b: Block) -> bool:
    """Whether block `b` goes on from block `a` on the page: what a heading or a lead-in
    introduces, a sentence the layout carried into the next block (it goes on in lower case
    or in brackets), a list's next item, the prose that takes up after code."""
    if b.kind == HEADING:
        return False
    if a.kind in (HEADING, DEBRIS) or b.kind == DEBRIS:
        return True
    if b.text.lstrip()[:1].islower():
        return True
    if a.kind in (PROSE, LIST) and not _ENDS_SENTENCE.search(a.text):
        return True
    return a.kind == b.kind == LIST


def _extent(blocks: list[Block], at: int) -> tuple[int, int]:
    """The run of blocks that goes on into block `at` and on from it."""
    first = last = at
    while first and _joins(blocks[first - 1], blocks[first]):
        first -= 1
    while last + 1 < len(blocks) and _joins(blocks[last], blocks[last + 1]):
        last += 1
    return first, last


def _fit(blocks: list[Block], first: int, last: int, at: int) -> list[Block] | None:
    """The blocks first..last, or as many around `at` as fit MAX_UNIT_CHARS and MAX_BLOCKS
    (growing forward first: a lead-in is followed by what it introduces); None when block
    `at` alone is too long."""
    if len(blocks[at].text) > MAX_UNIT_CHARS:
        return None
    lo = hi = at
    size = len(blocks[at].text)
    while hi - lo + 1 < MAX_BLOCKS:
        grew = False
        for nxt in (hi + 1, lo - 1):
            inside = first <= nxt <= last and not lo <= nxt <= hi
            if inside and size + len(blocks[nxt].text) <= MAX_UNIT_CHARS:
                size += len(blocks[nxt].text)
                lo, hi = min(lo, nxt), max(hi, nxt)
                grew = True
                break
        if not grew:
            break
    # A heading directly above what was kept names it.
    if lo and lo - 1 >= first and blocks[lo - 1].kind == HEADING:
        lo -= 1
    return blocks[lo : hi + 1]


def _debris(line: str) -> bool:
    """A word or two the layout left in the margin ("in", "package"): lower case, short, not
    a sentence."""
    words = line.split()
    return (
        0 < len(words) <= 2
        and line.lstrip()[:1].islower()
        and len(line.strip()) <= 25
        and not _ENDS_SENTENCE.search(line)
        and not _SYMBOLS.search(line)
    )


def _without_debris(text: str) -> str:
    """A block without margin words at its edges (a block of nothing else stays as it is and
    is told apart by its kind)."""
    lines = text.splitlines()
    if len(lines) > 1 and _debris(lines[-1]) and _ENDS_SENTENCE.search(lines[-2]):
        lines = lines[:-1]
    if len(lines) > 1 and _debris(lines[0]) and lines[1].lstrip()[:1].isupper():
        lines = lines[1:]
    return "\n".join(lines)


def _window(block: Block, best: Candidate, scores: dict[str, float]) -> Block:
    """Sentences around the best one in a block too long to show whole: grown towards the
    better-scoring neighbour while they fit."""
    found = sentences(block.text, 1, 0.0)
    at = next((i for i, s in enumerate(found) if best.text in s or s in best.text), None)
    if at is None:
        return Block(PROSE, best.text)
    first = last = at
    size = len(found[at])
    while True:
        before = scores.get(found[first - 1], 0.0) if first else -1.0
        after = scores.get(found[last + 1], 0.0) if last + 1 < len(found) else -1.0
        if max(before, after) < 0:
            break
        pick = first - 1 if before > after else last + 1
        if size + len(found[pick]) > WINDOW_CHARS:
            break
        size += len(found[pick])
        first, last = min(first, pick), max(last, pick)
    return Block(PROSE, " ".join(found[first : last + 1]))


def _quote(blocks: list[Block], best: Candidate, scores: dict[str, float], page: str) -> str:
    """The sentences that answer: the best one and the neighbours in its block that score
    nearly as well, as one run the page holds verbatim (else the best sentence alone)."""
    for block in blocks:
        if block.kind not in (PROSE, LIST):
            continue
        # A list's items are sentences of their own: a highlight never runs over a bullet.
        found = [
            piece.strip()
            for s in sentences(block.text, 1, 0.0)
            for piece in _SYMBOL_BULLET_INSIDE.split(s)
            if piece.strip()
        ]
        at = next((i for i, s in enumerate(found) if s == best.text), None)
        if at is None:
            continue
        first = last = at
        floor = best.score * HIGHLIGHT_SHARE
        while last - first + 1 < MAX_HIGHLIGHT and last + 1 < len(found):
            if scores.get(found[last + 1], 0.0) < floor:
                break
            last += 1
        while last - first + 1 < MAX_HIGHLIGHT and first:
            if scores.get(found[first - 1], 0.0) < floor:
                break
            first -= 1
        run = " ".join(found[first : last + 1])
        if normalise(run) in quotable(page):
            return run
    return best.text


# --- Markdown

# What would turn a verbatim sentence into markup: inline Markdown and HTML, a backslash only
# where CommonMark reads it as an escape or a line break (before ASCII punctuation or at the
# end), "_" only at a word's edge (inside a word it never emphasises), "&" before an entity.
_MARKDOWN_SPECIAL = re.compile(
    r"[`*\[\]<>|~]|\\(?=[!-/:-@\[-`{-~]|$)|(?<![^\W_])_|_(?![^\W_])|&(?=#?\w+;)", re.MULTILINE
)
_LINE_START = re.compile(r"^(\s*)([#>+\-=]|\d+[.)])")  # a heading, quote or list if first


def escape(text: str) -> str:
    """Source text shown as plain text inside Markdown."""
    escaped = _MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(0), text)

    def guard(match: re.Match[str]) -> str:
        marker = match.group(2)
        return match.group(1) + (marker[:-1] + "\\" + marker[-1])

    return _LINE_START.sub(guard, escaped)


def render(unit: Unit) -> str:
    """The unit as Markdown, block by block, with its structure: consecutive list items as one
    list (a block that goes on in lower case or in brackets belongs to the item before it),
    code as a fenced block, headings in bold, prose as paragraphs; margin words left out."""
    out: list[str] = []
    items: list[str] = []
    prose_open = False  # the last paragraph written goes on
    for i, block in enumerate(unit.blocks):
        if block.kind == DEBRIS and not _between_code(unit.blocks, i):
            continue  # a word in the margin; between two code examples it links them ("or")
        opens = block.text.lstrip()[:1]
        if items and block.kind == PROSE and (opens.islower() or opens in "(["):
            items[-1] += " " + _flat(block.text)
            continue
        if block.kind == LIST or (block.kind == PROSE and _has_items(block)):
            lead, found = _items(block)
            if lead:
                out += [*_list(items), escape(lead)]
                items = []
            items += found
            prose_open = False
            continue
        out += _list(items)
        items = []
        if block.kind == CODE:
            ticks = max((len(run) for run in re.findall(r"`+", block.text)), default=0)
            fence = "`" * max(3, ticks + 1)
            body = "\n".join(line.rstrip() for line in block.text.strip("\n").splitlines())
            out.append(f"{fence}\n{body}\n{fence}")
        elif block.kind == HEADING:
            out.append(f"**{escape(_flat(block.text))}**")
        elif out and prose_open:  # a sentence the layout carried over a blank line
            out[-1] += " " + escape(_flat(block.text))
        else:
            out.append(escape(_flat(block.text)))
        prose_open = block.kind == PROSE and not _ENDS_SENTENCE.search(block.text)
    out += _list(items)
    return "\n\n".join(out)


def _between_code(blocks: list[Block], i: int) -> bool:
    return 0 < i < len(blocks) - 1 and blocks[i - 1].kind == blocks[i + 1].kind == CODE


def _list(items: list[str]) -> list[str]:
    return ["\n".join(f"- {escape(item)}" for item in items)] if items else []


def _has_items(block: Block) -> bool:
    return sum(bool(_BULLET.match(line)) for line in block.lines) >= 1


def _items(block: Block) -> tuple[str, list[str]]:
    """The prose before a block's first bullet, and its items, bullets dropped, each item's
    lines joined."""
    lead: list[str] = []
    items: list[str] = []
    for line in block.lines:
        if _BULLET.match(line):
            items.append(_SYMBOL_BULLET.sub("", line, count=1))
        elif items:
            items[-1] += "\n" + line
        else:
            lead.append(line)
    return _flat("\n".join(lead)), [_flat(item) for item in items]


def real_heading(heading: str) -> bool:
    """A heading worth suggesting: short, not a sentence, a list item, a table-of-contents
    line (dot leaders, a page number at its end) nor a footnote."""
    if not 3 <= len(heading) <= 80 or heading.endswith((".", ",", ";", ":")):
        return False
    if re.search(r"(?:\.\s?){3,}|\s\d+$", heading) or _BULLET.match(heading):
        return False
    return len(heading.split()) <= 10
