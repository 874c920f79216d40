"""Office documents and e-books read into units in a capped child process: the samples are
written here by the same libraries' writers; the hostile ones are built byte by byte, small
on disk, and each ends in a FormatError a user can read, fast, with the test process (the
worker) untouched."""

from __future__ import annotations

import re
import struct
import time
import zipfile
import zlib
from pathlib import Path

import docx
import openpyxl
import pptx
import pytest
from ebooklib import epub
from odf.dc import Title
from odf.opendocument import OpenDocumentText
from odf.table import Table, TableCell, TableColumn, TableRow
from odf.text import H, P

from attachments.formats import FormatError
from attachments.formats.runner import is_kind, read_document, read_units
from attachments.formats.sniff import sniff

pytestmark = pytest.mark.slow  # each reading starts a child process

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


# --- Samples written by the libraries


def make_docx(path: Path) -> Path:
    document = docx.Document()
    document.core_properties.title = "Field Notes"
    document.add_paragraph("Written before any heading.")
    document.add_heading("Chapter 1", 1)
    document.add_paragraph("The first chapter.")
    document.add_heading("Methods", 2)
    document.add_paragraph("We counted birds.")
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            cell.text = f"r{r}c{c}"
    document.add_heading("Chapter 2", 1)
    for n in range(12):
        document.add_paragraph(f"Paragraph {n} " + "lorem ipsum " * 50)
    document.add_heading("Data", 2)
    big = document.add_table(rows=101, cols=2)
    big.rows[0].cells[0].text, big.rows[0].cells[1].text = "year", "count"
    for n in range(1, 101):
        big.rows[n].cells[0].text, big.rows[n].cells[1].text = str(1900 + n), str(n)
    document.save(str(path))
    return path


def make_pptx(path: Path) -> Path:
    presentation = pptx.Presentation()
    for n, (title, body) in enumerate([("Intro", "Why birds"), ("Method", "Counting")], 1):
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        slide.notes_slide.notes_text_frame.text = f"Remember point {n}"
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])  # title only
    slide.shapes.title.text = "Results"
    shape = slide.shapes.add_table(2, 2, 0, 0, 3_000_000, 1_000_000)
    for r, row in enumerate(shape.table.rows):
        for c, cell in enumerate(row.cells):
            cell.text = f"t{r}{c}"
    presentation.slides.add_slide(presentation.slide_layouts[6])  # blank, no title
    presentation.save(str(path))
    return path


def make_xlsx(path: Path, rows: int = 300) -> Path:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Budget"
    sheet.append(["item", "cost", "count"])
    for n in range(rows):
        sheet.append([f"item {n}", n * 1.5, n])
    workbook.create_sheet("Empty")
    workbook.create_sheet("Notes").append(["only one row"])
    workbook.save(str(path))
    return path


def make_odt(path: Path) -> Path:
    document = OpenDocumentText()
    document.meta.addElement(Title(text="Lab Book"))
    document.text.addElement(P(text="Opening words."))
    document.text.addElement(H(outlinelevel=1, text="Chapter 1"))
    document.text.addElement(P(text="Chapter one says this."))
    document.text.addElement(H(outlinelevel=2, text="Methods"))
    table = Table(name="T")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for values in (("a", "b"), ("1", "2")):
        row = TableRow()
        for value in values:
            cell = TableCell()
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    document.text.addElement(table)
    document.save(str(path))
    return path


def make_epub(path: Path, chapters: int = 3) -> Path:
    book = epub.EpubBook()
    book.set_identifier("id-1")
    book.set_title("Three Chapters")
    book.set_language("en")
    items = []
    for n in range(1, chapters + 1):
        chapter = epub.EpubHtml(title=f"Chapter {n}", file_name=f"chap_{n}.xhtml", lang="en")
        chapter.content = (
            f"<html><body><h1>Chapter {n}</h1><p>Text of chapter {n}.</p>"
            f"<h2>Part A</h2><p>More of chapter {n}.</p></body></html>"
        )
        book.add_item(chapter)
        items.append(chapter)
    book.toc = items
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *items]
    epub.write_epub(str(path), book)
    return path


def replace_member(path: Path, name: str, data: bytes) -> Path:
    """The zip at `path` with member `name` replaced by `data` (written to a new file)."""
    out = path.with_name("changed-" + path.name)
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info, data if info.filename == name else src.read(info))
    return out


# --- Hand-made zips: members given already deflated, so a bomb costs nothing to build


def deflated_zeros(total: int, chunk: int = 1 << 24) -> bytes:
    """Raw deflate of `total` zero bytes without compressing them all: after a full flush
    the compressor restarts, so every further chunk compresses to the same bytes."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    zero = bytes(chunk)
    first = compressor.compress(zero) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeat = compressor.compress(zero) + compressor.flush(zlib.Z_FULL_FLUSH)
    return first + repeat * (total // chunk - 1) + compressor.flush(zlib.Z_FINISH)


def raw_zip(path: Path, members: list[tuple[str, bytes, int, int]]) -> Path:
    """A zip of (name, deflated data, crc32, uncompressed size) members."""
    body, directory = b"", b""
    for name, data, crc, size in members:
        encoded = name.encode()
        header = struct.pack(
            "<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(data), size, len(encoded), 0
        )
        directory += (
            struct.pack(
                "<4s6H3L5H2L",
                b"PK\x01\x02",
                20,
                20,
                0,
                8,
                0,
                0,
                crc,
                len(data),
                size,
                len(encoded),
                0,
                0,
                0,
                0,
                0,
                len(body),
            )
            + encoded
        )
        body += header + encoded + data
    end = struct.pack(
        "<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(directory), len(body), 0
    )
    path.write_bytes(body + directory + end)
    return path


def deflated(data: bytes) -> tuple[bytes, int, int]:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush(), zlib.crc32(data), len(data)


def docx_with(tmp_path: Path, name: str, data: tuple[bytes, int, int]) -> Path:
    """A real .docx's members, with `name` replaced by the given deflated member."""
    source = make_docx(tmp_path / "source.docx")
    members = []
    with zipfile.ZipFile(source) as archive:
        for info in archive.infolist():
            if info.filename != name:
                members.append((info.filename, *deflated(archive.read(info))))
    members.append((name, *data))
    return raw_zip(tmp_path / "hostile.docx", members)


def document_xml(body: str, doctype: str = "") -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n{doctype}'
        f'<w:document xmlns:w="{W_NS}"><w:body>{body}</w:body></w:document>'
    ).encode()


def paragraph(text: str) -> str:
    return f"<w:p><w:r><w:t>{text}</w:t></w:r></w:p>"


BILLION_LAUGHS = (
    "<!DOCTYPE root [\n"
    '<!ENTITY a "lollollollollollollollollollol">\n'
    + "".join(
        f'<!ENTITY {chr(ord("a") + n + 1)} "{("&" + chr(ord("a") + n) + ";") * 10}">\n'
        for n in range(8)
    )
    + "]>\n"
)
XXE = '<!DOCTYPE root [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'


def texts(path: Path, kind: str | None = None) -> str:
    return "\n".join(unit.text for unit in read_document(path, kind).units)


# --- Reading


def test_docx_one_unit_per_section_with_heading_paths_tables_and_long_sections_split(tmp_path):
    units = read_document(make_docx(tmp_path / "notes.docx")).units
    labels = [unit.label for unit in units]
    assert labels[:3] == ["Field Notes", "Chapter 1", "Chapter 1 › Methods"]
    assert labels[3:5] == ["Chapter 2", "Chapter 2 (2)"]
    assert [u.number for u in units] == list(range(1, len(units) + 1))
    table = "r0c0 | r0c1 | r0c2\nr1c0 | r1c1 | r1c2\nr2c0 | r2c1 | r2c2"
    assert units[2].text == f"Methods\n\nWe counted birds.\n\n{table}"
    assert all(len(unit.text) <= 4000 for unit in units)
    data = "\n".join(u.text for u in units if u.label.startswith("Chapter 2 › Data"))
    # the 101-row table split by rows, each block under its header row
    assert data.count("year | count") == 3
    assert "2000 | 100" in data
    assert "1901 | 1" in data


def test_pptx_one_unit_per_slide_with_title_body_table_and_notes(tmp_path):
    units = read_document(make_pptx(tmp_path / "talk.pptx")).units
    assert [u.label for u in units] == [
        "Slide 1: Intro",
        "Slide 2: Method",
        "Slide 3: Results",
        "Slide 4",
    ]
    assert units[0].text == "Intro\n\nWhy birds\n\nNotes: Remember point 1"
    assert "t00 | t01\nt10 | t11" in units[2].text


def test_xlsx_rows_in_blocks_under_the_header_and_empty_sheets_skipped(tmp_path):
    document = read_document(make_xlsx(tmp_path / "budget.xlsx"))
    labels = [u.label for u in document.units]
    assert labels == [
        "Budget, rows 2–51",
        "Budget, rows 52–101",
        "Budget, rows 102–151",
        "Budget, rows 152–201",
        "Budget, rows 202–251",
        "Budget, rows 252–301",
        "Notes, row 1",
    ]
    first = document.units[0].text.splitlines()
    assert first[0] == "item | cost | count"
    assert first[1:3] == ["item 0 | 0 | 0", "item 1 | 1.5 | 1"]
    assert document.units[-2].text.splitlines()[0] == "item | cost | count"
    assert document.notices == []


def test_xlsx_cut_at_the_cell_cap_with_a_notice(tmp_path, settings):
    settings.FORMAT_MAX_CELLS = 100
    document = read_document(make_xlsx(tmp_path / "budget.xlsx"))
    assert [u.label for u in document.units] == ["Budget, rows 2–33"]
    (notice,) = document.notices
    assert "Only the first 100 cells" in notice
    assert "“Budget” was cut at row 34" in notice
    # as the formats registry reads it: the notice closes the last unit
    units = read_units(tmp_path / "budget.xlsx", "xlsx")
    assert units[-1].text.endswith(f"[{notice}]")


def test_odt_sections_and_table(tmp_path):
    units = read_document(make_odt(tmp_path / "lab.odt")).units
    assert [u.label for u in units] == ["Lab Book", "Chapter 1", "Chapter 1 › Methods"]
    assert units[2].text == "Methods\n\na | b\n1 | 2"


def test_epub_three_chapters_in_spine_order(tmp_path):
    units = read_document(make_epub(tmp_path / "book.epub")).units
    labels = [u.label for u in units]
    assert labels == [f"Chapter {n}{part}" for n in (1, 2, 3) for part in ("", " › Part A")]
    assert "Text of chapter 2." in next(u.text for u in units if u.label == "Chapter 2")


def test_sniff_by_content_never_by_name(tmp_path):
    assert sniff(make_docx(tmp_path / "a.bin")) == "docx"
    assert sniff(make_pptx(tmp_path / "b.docx")) == "pptx"
    assert sniff(make_xlsx(tmp_path / "c.txt")) == "xlsx"
    assert sniff(make_odt(tmp_path / "d")) == "odt"
    assert sniff(make_epub(tmp_path / "e.zip")) == "epub"
    assert is_kind(tmp_path / "a.bin", "docx")
    assert not is_kind(tmp_path / "a.bin", "xlsx")
    pdf = tmp_path / "paper.docx"
    pdf.write_bytes(b"%PDF-1.7\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n")
    assert sniff(pdf) is None
    other = tmp_path / "other.docx"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("readme.txt", "hello")
    assert sniff(other) is None


# --- Hostile files


def test_renamed_pdf_is_refused(tmp_path):
    pdf = tmp_path / "paper.docx"
    pdf.write_bytes(b"%PDF-1.7\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n")
    with pytest.raises(FormatError, match="damaged or not a real Word document"):
        read_document(pdf, "docx")
    with pytest.raises(FormatError, match="not a Word, PowerPoint, Excel"):
        read_document(pdf)


def test_truncated_files_are_damaged(tmp_path):
    whole = make_docx(tmp_path / "whole.docx").read_bytes()
    cut = tmp_path / "cut.docx"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(FormatError, match="damaged or not a real Word document"):
        read_document(cut, "docx")
    # the directory intact, the document's compressed bytes garbled
    garbled = docx_with(tmp_path, "word/document.xml", (b"\x00garbage" * 50, 1234, 5000))
    with pytest.raises(FormatError, match="damaged or not a real Word document"):
        read_document(garbled, "docx")


def test_zip_bomb_is_refused_from_the_directory_fast(tmp_path):
    bomb = docx_with(tmp_path, "word/document.xml", (deflated_zeros(1 << 30), 0, 1 << 30))
    assert bomb.stat().st_size < 2_000_000
    started = time.monotonic()
    with pytest.raises(FormatError, match="unpacks to more than 200 MB"):
        read_document(bomb)
    assert time.monotonic() - started < 5


def test_member_compressed_beyond_any_real_document_is_refused(tmp_path):
    size = 64 << 20  # under the total cap, but 1,000 times its stored size
    bomb = docx_with(tmp_path, "word/document.xml", (deflated_zeros(size), 0, size))
    with pytest.raises(FormatError, match="zip bomb"):
        read_document(bomb)


def test_many_member_zip_is_refused(tmp_path):
    source = make_docx(tmp_path / "source.docx")
    crowded = tmp_path / "crowded.docx"
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(crowded, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        for n in range(10_001):
            dst.writestr(f"x/{n}", b"")
    with pytest.raises(FormatError, match="more than 10,000 parts"):
        read_document(crowded)
    assert sniff(crowded) is None


def test_billion_laughs_in_a_docx_part_is_not_expanded(tmp_path):
    xml = document_xml(paragraph("start") + paragraph("&i;"), BILLION_LAUGHS)
    bomb = docx_with(tmp_path, "word/document.xml", deflated(xml))
    started = time.monotonic()
    with pytest.raises(FormatError, match="damaged or not a real Word document"):
        read_document(bomb)
    assert time.monotonic() - started < 5


def test_external_entity_in_a_docx_part_is_not_read(tmp_path):
    xml = document_xml(paragraph("before &xxe; after"), XXE)
    hostile = docx_with(tmp_path, "word/document.xml", deflated(xml))
    text = texts(hostile)
    assert "before" in text
    assert "root:" not in text


def epub_chapter(tmp_path: Path, body: str, doctype: str) -> Path:
    book = make_epub(tmp_path / "book.epub", chapters=1)
    chapter = (
        f'<?xml version="1.0" encoding="utf-8"?>\n{doctype}'
        '<html xmlns="http://www.w3.org/1999/xhtml"><body>'
        f"<h1>Chapter 1</h1><p>{body}</p></body></html>"
    ).encode()
    return replace_member(book, "EPUB/chap_1.xhtml", chapter)


def test_billion_laughs_and_external_entity_in_an_epub_chapter(tmp_path):
    laughs = epub_chapter(tmp_path, "start &i; end", BILLION_LAUGHS)
    started = time.monotonic()
    text = texts(laughs)
    assert "Chapter 1" in text
    assert "lollol" not in text
    assert time.monotonic() - started < 5
    xxe = epub_chapter(tmp_path, "before &xxe; after", XXE)
    text = texts(xxe)
    assert "before" in text
    assert "after" in text
    assert "root:" not in text


def test_sheet_declaring_a_million_rows_and_columns_reads_only_its_cells(tmp_path, settings):
    settings.FORMAT_MEMORY_MB = 400
    source = make_xlsx(tmp_path / "small.xlsx", rows=2)
    with zipfile.ZipFile(source) as archive:
        sheet = archive.read("xl/worksheets/sheet1.xml").decode()
    sheet = re.sub(r'<dimension ref="[^"]*"/>', '<dimension ref="A1:XFD1048576"/>', sheet)
    far = '<row r="1048576"><c r="XFD1048576" t="inlineStr"><is><t>far away</t></is></c></row>'
    sheet = sheet.replace("</sheetData>", far + "</sheetData>")
    huge = replace_member(source, "xl/worksheets/sheet1.xml", sheet.encode())
    started = time.monotonic()
    document = read_document(huge)
    assert time.monotonic() - started < 10
    budget = document.units[0]
    lines = budget.text.splitlines()
    assert lines[:3] == ["item | cost | count", "item 0 | 0 | 0", "item 1 | 1.5 | 1"]
    assert budget.text.rstrip().endswith("far away")


def test_child_memory_cap_stops_a_real_blow_up(tmp_path, settings):
    """A small file whose parse tree needs far more memory than the cap: the child is
    stopped by its address-space limit and the parent reports it."""
    settings.FORMAT_MEMORY_MB = 256
    # numbered, so that it compresses like text (not like a bomb): about 40 MB, 4 MB stored
    xml = document_xml("".join(paragraph(f"paragraph {n}") for n in range(800_000)))
    heavy = docx_with(tmp_path, "word/document.xml", deflated(xml))
    with pytest.raises(FormatError, match="more memory to read than allowed"):
        read_document(heavy)


@pytest.mark.parametrize("megabytes", [30, 40])
def test_a_cap_below_what_the_reader_needs_to_start_is_reported_as_memory(
    tmp_path, settings, megabytes
):
    settings.FORMAT_MEMORY_MB = megabytes
    with pytest.raises(FormatError, match="more memory to read than allowed"):
        read_document(make_xlsx(tmp_path / "budget.xlsx"))


def test_slow_reading_is_stopped_at_the_deadline(tmp_path, settings):
    settings.FORMAT_TIMEOUT = 0.2  # less than a child takes to start
    with pytest.raises(FormatError, match=r"took longer than 0\.2 s"):
        read_document(make_docx(tmp_path / "notes.docx"))


@pytest.mark.parametrize("doctype", [BILLION_LAUGHS, XXE], ids=["laughs", "xxe"])
def test_entities_in_odt_and_xlsx_parts_are_refused(tmp_path, doctype):
    """A DTD declaring entities in an ODT or XLSX part: the file is refused as damaged
    (odfpy and openpyxl parse through defusedxml), nothing expanded or read."""
    entity = "&i;" if doctype == BILLION_LAUGHS else "&xxe;"
    source = make_odt(tmp_path / "lab.odt")
    with zipfile.ZipFile(source) as archive:
        content = archive.read("content.xml").decode()
    content = content.replace("Opening words.", entity)
    content = content.replace("?>", "?>\n" + doctype, 1)
    odt = replace_member(source, "content.xml", content.encode())
    with pytest.raises(FormatError, match="damaged or not a real OpenDocument text"):
        read_document(odt)
    source = make_xlsx(tmp_path / "budget.xlsx", rows=1)
    with zipfile.ZipFile(source) as archive:
        sheet = archive.read("xl/worksheets/sheet1.xml").decode()
    cell = f'<c r="A3" t="inlineStr"><is><t>{entity}</t></is></c>'
    sheet = sheet.replace("</sheetData>", f'<row r="3">{cell}</row></sheetData>')
    sheet = sheet.replace("?>", "?>\n" + doctype, 1) if "?>" in sheet else doctype + sheet
    xlsx = replace_member(source, "xl/worksheets/sheet1.xml", sheet.encode())
    with pytest.raises(FormatError, match="damaged or not a real Excel workbook"):
        read_document(xlsx)
