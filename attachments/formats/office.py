"""Office documents and e-books read into units: .docx, .odt and .epub by section, .pptx by
slide, .xlsx by sheet and block of rows.

These readers parse untrusted files and run ONLY in the capped child process
(`attachments.formats.child`); the worker calls `attachments.formats.runner.read_document`.
The zip container has been checked (`sniff.check_zip`) before any of them opens it; XML is
parsed without DTDs, entity expansion or network access.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import docx
import ebooklib
import openpyxl
import pptx
from docx.table import Table as DocxTable
from docx.text.paragraph import Paragraph
from ebooklib import epub
from lxml import etree
from odf import opendocument, teletype
from odf.namespaces import TABLENS, TEXTNS
from pptx.enum.shapes import MSO_SHAPE_TYPE

from attachments.formats import Unit

SECTION_CHARS = 4000  # a longer section is split into "… (2)", "… (3)"
TABLE_ROWS = 40  # a longer table is split by rows, its header row repeated
SHEET_BLOCK_ROWS = 50  # data rows per spreadsheet unit
SEPARATOR = " › "

_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)


@dataclass
class Reading:
    """What a reader produced: the units in order, and notices for the user (a sheet cut at
    the cell cap: `{"notice": "cells_cut", "sheet", "row", "limit"}`), put into words by the
    parent."""

    units: list[Unit] = field(default_factory=list)
    notices: list[dict[str, Any]] = field(default_factory=list)


def _split_long(text: str, limit: int) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut at a line break or a space."""
    pieces: list[str] = []
    while len(text) > limit:
        cut = text.rfind("\n", 0, limit)
        if cut < limit // 2:
            cut = text.rfind(" ", 0, limit)
        if cut < limit // 2:
            cut = limit
        pieces.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        pieces.append(text)
    return pieces


def table_blocks(rows: list[list[str]], max_rows: int = TABLE_ROWS) -> list[str]:
    """A table as text rows ("a | b | c"): whole when it has at most `max_rows` rows, else in
    blocks of rows, each beginning with the header row."""
    lines = [
        " | ".join(cell.strip() for cell in row) for row in rows if any(c.strip() for c in row)
    ]
    if len(lines) <= max_rows:
        return ["\n".join(lines)] if lines else []
    header, body = lines[0], lines[1:]
    step = max_rows - 1
    return ["\n".join([header, *body[i : i + step]]) for i in range(0, len(body), step)]


class Sections:
    """Collects blocks of text under a heading path and cuts them into units."""

    def __init__(self, start_label: str) -> None:
        self.units: list[Unit] = []
        self.path: list[tuple[int, str]] = []
        self.label = start_label
        self.blocks: list[str] = []

    def heading(self, level: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            return
        self.flush()
        while self.path and self.path[-1][0] >= level:
            self.path.pop()
        self.path.append((level, title))
        self.label = SEPARATOR.join(t for _, t in self.path)
        self.blocks = [title]

    def add(self, text: str) -> None:
        text = text.strip()
        if text:
            self.blocks.append(text)

    def table(self, rows: list[list[str]]) -> None:
        for block in table_blocks(rows):
            self.add(block)

    def flush(self) -> None:
        pieces: list[str] = []
        current = ""
        for block in self.blocks:
            for part in _split_long(block, SECTION_CHARS):
                if current and len(current) + 2 + len(part) > SECTION_CHARS:
                    pieces.append(current)
                    current = part
                else:
                    current = f"{current}\n\n{part}" if current else part
        if current:
            pieces.append(current)
        for index, piece in enumerate(pieces):
            label = self.label if index == 0 else f"{self.label} ({index + 1})"
            self.units.append(Unit(number=len(self.units) + 1, text=piece, label=label))
        self.blocks = []

    def finish(self) -> Reading:
        self.flush()
        return Reading(self.units)


def _start_label(title: str | None) -> str:
    title = " ".join((title or "").split())
    return title or "Start"


# --- Word (.docx)


def _docx_rows(table: DocxTable) -> list[list[str]]:
    rows: list[list[str]] = []
    for row in table.rows:
        cells: list[str] = []
        previous: Any = None
        for cell in row.cells:
            if cell._tc is previous:  # a merged cell repeats; keep it once
                continue
            previous = cell._tc
            cells.append(" ".join(cell.text.split()))
        rows.append(cells)
    return rows


def _docx_heading_levels(document: Any) -> dict[str, int]:
    """Paragraph style id → heading level, for the "Heading N" styles. Looked up once: asking
    each paragraph for its style scans all the styles every time (minutes for a long file)."""
    levels: dict[str, int] = {}
    for style in document.styles:
        match = _HEADING_STYLE.match(getattr(style, "name", "") or "")
        if match and style.style_id:
            levels[style.style_id] = int(match.group(1))
    return levels


def read_docx(path: str) -> Reading:
    document = docx.Document(path)
    levels = _docx_heading_levels(document)
    sections = Sections(_start_label(document.core_properties.title))
    for block in document.iter_inner_content():
        if isinstance(block, Paragraph):
            level = levels.get(block._p.style or "")
            if level is not None:
                sections.heading(level, block.text)
            else:
                sections.add(block.text)
        else:
            sections.table(_docx_rows(block))
    return sections.finish()


# --- OpenDocument text (.odt)


def _odf_name(node: Any) -> tuple[str, str] | None:
    qname = getattr(node, "qname", None)
    return qname if isinstance(qname, tuple) else None


def _odt_rows(table: Any) -> list[list[str]]:
    rows: list[list[str]] = []
    for row in _odf_descendants(table, (TABLENS, "table-row")):
        cells = [
            " ".join(teletype.extractText(cell).split())
            for cell in row.childNodes
            if _odf_name(cell) == (TABLENS, "table-cell")
        ]
        rows.append(cells)
    return rows


def _odf_descendants(node: Any, qname: tuple[str, str]) -> Iterator[Any]:
    # repeated rows ("number-rows-repeated") are not expanded: only rows present are read
    for child in node.childNodes:
        if _odf_name(child) == qname:
            yield child
        elif _odf_name(child) != (TABLENS, "table"):  # a nested table is a cell's content
            yield from _odf_descendants(child, qname)


def _odt_walk(node: Any, sections: Sections) -> None:
    for child in node.childNodes:
        name = _odf_name(child)
        if name == (TEXTNS, "h"):
            level = child.getAttrNS(TEXTNS, "outline-level") or "1"
            sections.heading(int(level) if str(level).isdigit() else 1, teletype.extractText(child))
        elif name == (TEXTNS, "p"):
            sections.add(teletype.extractText(child))
        elif name == (TABLENS, "table"):
            sections.table(_odt_rows(child))
        elif name is not None:  # lists, sections, frames: their paragraphs in order
            _odt_walk(child, sections)


def read_odt(path: str) -> Reading:
    document = opendocument.load(path)
    title = ""
    for node in document.meta.childNodes:
        if getattr(node, "tagName", "") == "dc:title":
            title = teletype.extractText(node)
    sections = Sections(_start_label(title))
    _odt_walk(document.text, sections)
    return sections.finish()


# --- E-books (.epub)

# No DTD loaded, no entity expanded, no network, no huge text nodes; `recover` keeps a chapter
# with an undefined entity (&nbsp; without its DTD) readable.
XML_PARSER = etree.XMLParser(
    resolve_entities=False,
    load_dtd=False,
    no_network=True,
    huge_tree=False,
    recover=True,
    remove_comments=True,
    remove_pis=True,
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCKS = {"p", "li", "pre", "blockquote", "dt", "dd", "figcaption", "caption", "address"}
_SKIP = {"script", "style", "head", "nav"}


def _local(element: Any) -> str:
    tag = element.tag
    return etree.QName(tag).localname.lower() if isinstance(tag, str) else ""


def _text(element: Any) -> str:
    parts = [t for t in element.itertext() if isinstance(t, str)]
    return " ".join("".join(parts).split())


def _html_rows(table: Any) -> list[list[str]]:
    rows: list[list[str]] = []
    for row in table.iter():
        if _local(row) == "tr":
            rows.append([_text(cell) for cell in row if _local(cell) in ("td", "th")])
    return rows


def _html_walk(element: Any, sections: Sections) -> None:
    if element.text and element.text.strip():
        sections.add(" ".join(element.text.split()))
    for child in element:
        name = _local(child)
        if name in _SKIP:
            pass
        elif name in _HEADINGS:
            sections.heading(_HEADINGS[name], _text(child))
        elif name == "table":
            sections.table(_html_rows(child))
        elif name in _BLOCKS:
            sections.add(_text(child))
        else:
            _html_walk(child, sections)
        if child.tail and child.tail.strip():
            sections.add(" ".join(child.tail.split()))


def read_epub(path: str) -> Reading:
    book = epub.read_epub(path, options={"ignore_ncx": True})
    titles = book.get_metadata("DC", "title")
    sections = Sections(_start_label(titles[0][0] if titles else ""))
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT:
            continue
        if isinstance(item, epub.EpubNav):  # the table of contents, not the text
            continue
        # `content`: the chapter's bytes as stored (get_content() re-parses and rebuilds it)
        root = etree.fromstring(item.content, parser=XML_PARSER)
        if root is None:
            continue
        body = next((el for el in root.iter() if _local(el) == "body"), root)
        _html_walk(body, sections)
    return sections.finish()


# --- PowerPoint (.pptx)


def _shape_texts(shapes: Any, title_id: int | None) -> Iterator[str]:
    for shape in shapes:
        if shape.shape_id == title_id:
            continue
        if getattr(shape, "shape_type", None) == MSO_SHAPE_TYPE.GROUP:
            yield from _shape_texts(shape.shapes, title_id)
        elif getattr(shape, "has_table", False) and shape.has_table:
            rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
            yield from table_blocks(rows)
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            yield shape.text_frame.text


def read_pptx(path: str) -> Reading:
    presentation = pptx.Presentation(path)
    reading = Reading()
    for number, slide in enumerate(presentation.slides, start=1):
        title_shape = slide.shapes.title
        title = " ".join(title_shape.text.split()) if title_shape is not None else ""
        title_id = title_shape.shape_id if title_shape is not None else None
        parts = [title] if title else []
        parts += [t.strip() for t in _shape_texts(slide.shapes, title_id) if t.strip()]
        if slide.has_notes_slide:
            frame = slide.notes_slide.notes_text_frame
            if frame is not None and frame.text.strip():
                parts.append("Notes: " + frame.text.strip())
        label = f"Slide {number}: {title}" if title else f"Slide {number}"
        reading.units.append(Unit(number=number, text="\n\n".join(parts), label=label))
    return reading


# --- Excel (.xlsx)


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return value.date().isoformat()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return " ".join(str(value).split())


def _sheet_unit(
    reading: Reading, name: str, header: list[str], block: list[tuple[int, list[str]]]
) -> None:
    lines = [" | ".join(header)] + [" | ".join(cells) for _, cells in block]
    label = f"{name}, rows {block[0][0]}–{block[-1][0]}"
    reading.units.append(Unit(len(reading.units) + 1, "\n".join(lines), label))


def _read_sheet(sheet: Any, reading: Reading, budget: int, max_cells: int) -> int:
    """Add the sheet's units to `reading`; the cell budget left (negative: cut here)."""
    # Ignore the declared dimension ("A1:XFD1048576"): rows are not padded to it.
    sheet.reset_dimensions()
    header: list[str] | None = None
    header_row = 0
    before = len(reading.units)
    block: list[tuple[int, list[str]]] = []
    for index, row in enumerate(sheet.iter_rows(values_only=True), start=1):
        if not row:
            continue
        budget -= len(row)
        if budget < 0:
            reading.notices.append(
                {"notice": "cells_cut", "sheet": sheet.title, "row": index, "limit": max_cells}
            )
            break
        cells = [_cell_text(v) for v in row]
        while cells and not cells[-1]:
            cells.pop()
        if not cells:
            continue
        if header is None:
            header, header_row = cells, index
            continue
        block.append((index, cells))
        if len(block) == SHEET_BLOCK_ROWS:
            _sheet_unit(reading, sheet.title, header, block)
            block = []
    if header is not None and block:
        _sheet_unit(reading, sheet.title, header, block)
    if header is not None and len(reading.units) == before:
        # a sheet of one row only: that row is its content
        label = f"{sheet.title}, row {header_row}"
        reading.units.append(Unit(len(reading.units) + 1, " | ".join(header), label))
    return budget


def read_xlsx(path: str, max_cells: int) -> Reading:
    """Each sheet's rows in blocks of SHEET_BLOCK_ROWS under its header row ("Budget, rows
    2–51"); empty sheets skipped. At most `max_cells` cells (rows × columns as stored) are read
    in all; the rest is cut, with a notice."""
    workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
    reading = Reading()
    budget = max_cells
    try:
        for sheet in workbook.worksheets:
            budget = _read_sheet(sheet, reading, budget, max_cells)
            if budget < 0:
                break
    finally:
        workbook.close()
    return reading


READERS = {"docx": read_docx, "odt": read_odt, "epub": read_epub, "pptx": read_pptx}
