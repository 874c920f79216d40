"""Running heads and footers stay out of chunks; footnotes and list items are no headings. On the
real eval PDFs (real extraction; marked `eval`), on a sample and on small made-up documents for
the rules' edges."""

from __future__ import annotations

import functools
import re

import pytest

from attachments.chunking import Chunk, chunk_pages, classify_headings
from attachments.pdf.extract import ExtractedPage, extract_text
from attachments.pdf.layout import find_boilerplate, segments
from tests.fixtures.documents import BODY, EVAL_PDFS, SAMPLES, page, para

HEAD_LINE = re.compile(r"^(Chapter \d+|Appendix [A-Z]|Kapitel \d+|Anhang [A-Z]): ", re.MULTILINE)


@functools.cache
def extracted(name: str) -> list[ExtractedPage]:
    """A sample's pages, or an evaluation PDF's (for the tests marked `eval`)."""
    return extract_text(SAMPLES / name if (SAMPLES / name).exists() else EVAL_PDFS / name).pages


def chunks_of(name: str) -> list[Chunk]:
    pages = extracted(name)
    chunks = chunk_pages(pages)
    texts = {p.number: p.text for p in pages}
    for chunk in chunks:  # citations find quotes in the page text by these offsets
        assert texts[chunk.page_number][chunk.start : chunk.end] == chunk.content
    return chunks


def running_texts(name: str) -> dict[int, list[str]]:
    pages = {p.number: p for p in extracted(name)}
    running = find_boilerplate(list(pages.values())).running
    return {n: [pages[n].text[a:b] for a, b in spans] for n, spans in running.items()}


def headings_of(name: str) -> dict[int, list[str]]:
    pages = {p.number: p for p in extracted(name)}
    out: dict[int, list[str]] = {}
    for (number, start), _ in sorted(classify_headings(list(pages.values())).items()):
        out.setdefault(number, []).append(pages[number].text[start:].split("\n", 1)[0])
    return out


def assert_outside_running_lines(name: str, chunks: list[Chunk]) -> None:
    """No chunk holds a running head or footer; every other line is in a chunk."""
    running = find_boilerplate(extracted(name)).running
    for chunk in chunks:
        for start, end in running.get(chunk.page_number, []):
            assert end <= chunk.start or chunk.end <= start, (chunk.page_number, chunk.content)
    for extracted_page in extracted(name):
        number = extracted_page.number
        covered = {i for c in chunks if c.page_number == number for i in range(c.start, c.end)}
        heads = {start for start, _ in running.get(number, [])}
        lost = [
            s.text
            for s in segments(extracted_page)
            if s.start not in heads and s.start not in covered
        ]
        assert not lost, (number, lost)


@pytest.mark.eval
def test_r_data_running_heads_and_page_numbers_stay_out_of_chunks():
    chunks = chunks_of("R-data.pdf")
    assert_outside_running_lines("R-data.pdf", chunks)
    assert not [c.content[:60] for c in chunks if HEAD_LINE.search(c.content)]
    assert not [c.content[:60] for c in chunks if re.match(r"\d+\n", c.content)]
    running = running_texts("R-data.pdf")
    assert running[31] == ["Chapter 7: Connections", "27"]
    assert running[6] == ["Acknowledgements", "2"]  # a one-page head, beside its page number
    # ... but the chapter's own title on its opening page is content, and a heading.
    assert "7 Connections" in headings_of("R-data.pdf")[30]
    opening = next(c for c in chunks if c.page_number == 30)
    assert opening.content.startswith("7 Connections")


@pytest.mark.eval
def test_r_intro_chunks_neither_start_with_nor_hold_running_heads():
    chunks = chunks_of("R-intro.pdf")
    assert_outside_running_lines("R-intro.pdf", chunks)
    assert not [c.content[:60] for c in chunks if HEAD_LINE.search(c.content)]
    titled = [c.page_number for c in chunks if c.content.startswith("An Introduction to R")]
    assert titled == [1]  # the title page, not a running head
    datasets = next(c for c in chunks if "All the datasets supplied with R" in c.content)
    assert datasets.page_number == 41
    assert datasets.content.startswith("All the datasets supplied with R")
    assert datasets.heading_path[-2:] == [
        "7 Reading data from files",
        "7.3 Accessing builtin datasets",
    ]
    # Heads of chapters one page long are found by their family ("Chapter N:").
    assert running_texts("R-intro.pdf")[50] == [
        "Chapter 9: Grouping, loops and conditional execution",
        "44",
    ]


@pytest.mark.eval
def test_footnotes_and_list_items_are_not_headings_but_numbered_headings_are():
    headings = headings_of("R-intro.pdf")
    everything = [h for page in headings.values() for h in page]
    assert not [h for h in everything if h.startswith(("1 See the on-line help", "3 So it is"))]
    assert not [h for h in everything if re.match(r"\d\. ", h)]  # "2. Start the R program …"
    assert not [h for h in everything if HEAD_LINE.match(h)]
    assert "7 Reading data from files" in headings[39]
    assert "7.3 Accessing builtin datasets" in headings[40]
    assert "2 Spreadsheet-like data" in headings_of("R-data.pdf")[12]
    assert not [h for h in headings_of("R-data.pdf")[12] if h.startswith("1. Encoding")]
    assert "5.2 Changing linebreaks" in headings_of("url.pdf")[4]


def test_a_short_document_loses_its_page_numbers_only():
    assert running_texts("text.pdf") == {n: [str(n)] for n in range(1, 4)}
    assert_outside_running_lines("text.pdf", chunks_of("text.pdf"))
    assert headings_of("text.pdf") == {
        1: ["1 Herons of the Millpond"],
        2: ["2 Kingfishers along the Weir"],
        3: ["3 Otters at the Sluice Gate"],
    }


@pytest.mark.eval
def test_chinese_running_heads_go_and_chapter_titles_stay_headings():
    chunks = chunks_of("lshort-zh-cn.pdf")
    assert_outside_running_lines("lshort-zh-cn.pdf", chunks)
    running = running_texts("lshort-zh-cn.pdf")
    assert running[34] == ["22", "第三章 文档元素"]  # even pages: the chapter
    assert running[35] == ["§3.5 特殊环境", "23"]  # odd pages: the section
    assert running[33] == ["§3.2 标题页"]  # a section's only page: its family
    # The chapter's title where it opens the chapter (large type) is a heading, not a head.
    assert "第三章 文档元素" in headings_of("lshort-zh-cn.pdf")[31]
    later = next(c for c in chunks if c.page_number == 34)
    assert later.heading_path[0] == "第三章 文档元素"
    assert "第三章 文档元素" not in later.content


@pytest.mark.eval
def test_german_running_heads_go_and_headings_stay():
    chunks = chunks_of("lilypond-essay.de.pdf")
    assert_outside_running_lines("lilypond-essay.de.pdf", chunks)
    assert not [c.content[:60] for c in chunks if HEAD_LINE.search(c.content)]
    headings = headings_of("lilypond-essay.de.pdf")
    assert "1.2 Details des Notensetzens" in headings[7]
    assert "2 Literatur" in headings[24]


def book(pages: int, *, body_lines: int = 4) -> list[ExtractedPage]:
    """A book with the title at the top of even pages, the chapter at the top of odd ones and
    the page number (physical page + 10) beside it."""
    out = []
    for n in range(1, pages + 1):
        head = "A Book About Things" if n % 2 == 0 else f"Chapter {1 + n // 6}: Things part {n}"
        blocks = [(head, BODY, False), (str(n + 10), BODY, False)]
        blocks += [(para(40, f"p{n}w{i}x"), BODY, False) for i in range(body_lines)]
        out.append(page(n, blocks))
    return out


def test_alternating_heads_and_numbers_are_found_on_every_page():
    pages = book(8)
    running = find_boilerplate(pages).running
    for p in pages:
        assert [p.text[a:b] for a, b in running[p.number]] == p.text.split("\n\n")[:2]
    for chunk in chunk_pages(pages):
        assert "Book About" not in chunk.content
        assert "Chapter" not in chunk.content


def test_a_running_line_inside_a_chunk_region_splits_the_chunk_around_it():
    # pdfminer may put a page number between two paragraphs; it must not end up in a chunk.
    pages = []
    for n in range(1, 5):
        first, second = para(30, f"a{n}x"), para(30, f"b{n}x")
        pages.append(
            page(n, [(first, BODY, False), (f"{n + 4}", BODY, False), (second, BODY, False)])
        )
    chunks = chunk_pages(pages)
    for p in pages:
        mine = [c for c in chunks if c.page_number == p.number]
        assert [c.content for c in mine] == [p.text.split("\n\n")[0], p.text.split("\n\n")[2]]


def test_numbers_that_do_not_follow_the_pages_are_kept():
    # A table's last row at the bottom of pages: numbers, but not in step with the pages.
    pages = [
        page(n, [(para(60, f"t{n}x"), BODY, False), (str(value), BODY, False)])
        for n, value in zip(range(1, 6), (7, 3, 12, 40, 5), strict=True)
    ]
    assert find_boilerplate(pages).running == {}
    roman = [
        page(n, [(numeral, BODY, False), (para(60, f"r{n}x"), BODY, False)])
        for n, numeral in zip(range(1, 5), ("i", "ii", "iii", "iv"), strict=True)
    ]
    assert sorted(find_boilerplate(roman).running) == [1, 2, 3, 4]


def test_only_lines_at_the_edge_of_three_pages_or_more_are_running():
    topics = ["cats", "rivers", "stars", "trains", "maps", "bells", "ropes"]

    def lines(n: int) -> str:  # numbers aside, the lines differ from page to page
        return "\n".join(f"A line on {topics[n]} and {topics[i]}, more words." for i in range(4))

    footer = ("Draft: do not cite", BODY, False)
    twice = [  # "Note n" tops two pages only
        page(n, [(f"Note {n}", BODY, False), (lines(n), BODY, False), footer]) for n in (1, 2)
    ]
    middle = [  # "Warning: keep this" repeats in the middle of pages
        page(n, [(lines(n), BODY, False), ("Warning: keep this", BODY, False),
                 (lines(n), BODY, False), footer])
        for n in range(3, 7)
    ]  # fmt: skip
    pages = twice + middle
    running = find_boilerplate(pages).running
    found = {n: [pages[n - 1].text[a:b] for a, b in spans] for n, spans in running.items()}
    assert found == {n: ["Draft: do not cite"] for n in range(1, 7)}


def test_list_items_and_small_print_are_never_headings():
    small = 8.0
    pages = [
        page(
            1,
            [
                ("5.2 Changing linebreaks", BODY, False),
                (para(40, "a"), BODY, False),
                ("1. Install the package", BODY, False),
                ("• first item", BODY, True),
                ("(a) the first case", BODY, False),
                ("第 3 章 排版文字", BODY, False),
                ("2.1 Die Geschichte von LilyPond", BODY, False),
                (para(40, "b"), BODY, False),
                ("1 See the on-line help for the details of this.", small, False),
                ("2 Footnotes in small print", small, False),
            ],
        )
    ]
    levels = classify_headings(pages)
    text = pages[0].text
    headings = sorted(text[s:].split("\n", 1)[0] for (_, s) in levels)
    assert headings == [
        "2.1 Die Geschichte von LilyPond",
        "5.2 Changing linebreaks",
        "第 3 章 排版文字",
    ]


def test_a_heading_wrapped_onto_two_lines_is_one_heading():
    lines = "2.7 Index vectors; selecting and modifying subsets of a data\nset"
    pages = [page(1, [(lines, 14.0, True), (para(80, "x"), BODY, False)])]
    (chunk,) = chunk_pages(pages)
    assert chunk.heading_path == [
        "2.7 Index vectors; selecting and modifying subsets of a data set"
    ]


def test_ocr_pages_lose_their_heads_too():
    """OCR text: a page is one box of lines without font sizes."""
    pages = [
        ExtractedPage(n, f"Chapter 1: Introduction\n{n + 2}\n" + para(60, f"o{n}x"), is_ocr=True)
        for n in range(1, 5)
    ]
    chunks = chunk_pages(pages)
    assert chunks
    assert all(c.content.startswith(f"o{c.page_number}x0") for c in chunks)


def test_cjk_lines_glyphs_and_nearly_equal_sizes_make_sensible_headings():
    pages = [
        page(
            1,
            [
                ("第一章 基本概念", 20.7, False),
                (para(60, "a"), BODY, False),
                ("1.1 概述", 14.3, False),
                (para(60, "b"), BODY, False),
                ("LATEX 的缺点也是显而易见的：", BODY, False),  # no capitals: CJK has no case
                (para(60, "c"), BODY, False),
                ("hhhh", 20.0, False),  # a music font's glyphs
                ("(cid:26) c", 20.0, False),
            ],
        ),
        page(
            2,
            [
                ("第二章 排版文字", 20.2, False),
                (para(60, "d"), BODY, False),
                ("2.1 编码", 14.0, False),
                (para(60, "e"), BODY, False),
            ],
        ),
    ]
    levels = classify_headings(pages)
    found = {pages[n - 1].text[s:].split("\n", 1)[0]: level for (n, s), level in levels.items()}
    assert found == {"第一章 基本概念": 1, "1.1 概述": 2, "第二章 排版文字": 1, "2.1 编码": 2}
