from __future__ import annotations

import itertools

from attachments.chunking import (
    OVERLAP,
    TARGET_MAX,
    TARGET_MIN,
    chunk_pages,
    classify_headings,
)
from attachments.pdf.extract import ExtractedPage
from tests.fixtures.documents import BODY, page, para


def test_chunks_stay_within_target_sizes_and_offsets_point_into_the_page():
    pages = [page(1, [(para(120, "a"), BODY, False) for _ in range(8)])]
    chunks = chunk_pages(pages)
    assert len(chunks) > 3
    for chunk in chunks:
        assert len(chunk.content) <= TARGET_MAX
        assert pages[0].text[chunk.start : chunk.end] == chunk.content
    # all but the last reach the minimum size
    assert all(len(c.content) >= TARGET_MIN for c in chunks[:-1])


def test_a_long_paragraph_is_split_with_overlap_at_sentence_boundaries():
    text = para(1200, "s")
    chunks = chunk_pages([page(1, [(text, BODY, False)])])
    assert len(chunks) >= 4
    for first, second in itertools.pairwise(chunks):
        overlap = first.end - second.start
        assert 0 < overlap <= OVERLAP + 100
        assert first.content.endswith(".")  # cut after a sentence, not mid-word
        assert second.content[0].isalpha()


def test_chunks_never_cross_a_page_boundary():
    pages = [page(n, [(para(100, f"p{n}x"), BODY, False)]) for n in (1, 2, 3)]
    chunks = chunk_pages(pages)
    assert {c.page_number for c in chunks} == {1, 2, 3}
    for chunk in chunks:
        assert f"p{chunk.page_number}x" in chunk.content
        other = {1, 2, 3} - {chunk.page_number}
        assert not any(f"p{n}x" in chunk.content for n in other)


def test_headings_by_font_size_start_chunks_and_build_a_path():
    pages = [
        page(
            1,
            [
                ("3 Data frames", 17.0, True),
                (para(100, "intro"), BODY, False),
                ("3.1 Making data frames", 14.0, True),
                (para(100, "making"), BODY, False),
                ("3.2 Attaching lists", 14.0, True),
                (para(100, "attach"), BODY, False),
            ],
        ),
        page(2, [(para(100, "more"), BODY, False)]),
    ]
    chunks = chunk_pages(pages)
    by_word = {c.content.split()[-1].rstrip(".")[:5]: c for c in chunks}
    assert chunks[0].content.startswith("3 Data frames")
    assert chunks[0].heading_path == ["3 Data frames"]
    making = next(c for c in chunks if "making0" in c.content)
    assert making.content.startswith("3.1 Making data frames")
    assert making.heading_path == ["3 Data frames", "3.1 Making data frames"]
    attach = next(c for c in chunks if "attach0" in c.content)
    assert attach.heading_path == ["3 Data frames", "3.2 Attaching lists"]
    # the path carries over to the next page
    more = next(c for c in chunks if "more0" in c.content)
    assert more.heading_path == ["3 Data frames", "3.2 Attaching lists"]
    assert by_word


def test_regex_and_caps_headings_without_font_information():
    pages = [
        ExtractedPage(
            1,
            "CHAPTER 2 GETTING STARTED\n\n"
            + para(60, "a")
            + "\n\n2.1 Installing the software\n\n"
            + para(60, "b"),
        )
    ]
    levels = classify_headings(pages)
    headings = sorted(pages[0].text[s : pages[0].text.index("\n", s)] for (_, s) in levels)
    assert headings == ["2.1 Installing the software", "CHAPTER 2 GETTING STARTED"]


def test_running_heads_and_toc_lines_are_not_headings():
    pages = [
        page(n, [("Chapter 1: Introduction", 12.0, False), (para(80, f"x{n}"), BODY, False)])
        for n in range(1, 5)
    ]
    pages.append(page(5, [("1.2 Using R . . . . . . . . 14", BODY, True), (para(80), BODY, False)]))
    assert classify_headings(pages) == {}


def test_a_small_table_is_kept_whole():
    table = "\n".join(f"name{i}    {i * 3}    {i * 7}    yes" for i in range(12))
    pages = [
        page(
            1,
            [
                (para(200, "pre"), BODY, False),
                (table, BODY, False),
                (para(50, "post"), BODY, False),
            ],
        )
    ]
    chunks = chunk_pages(pages)
    holding = [c for c in chunks if "name0" in c.content or "name11" in c.content]
    assert len(holding) == 1
    assert "name0" in holding[0].content
    assert "name11" in holding[0].content
    assert holding[0].is_table


def test_cjk_text_is_chunked_and_counts_tokens_per_character():
    text = "。".join(["人工智能是计算机科学的一个分支"] * 200) + "。"
    chunks = chunk_pages([page(1, [(text, BODY, False)])])
    assert len(chunks) >= 2
    assert all(len(c.content) <= TARGET_MAX for c in chunks)
    assert chunks[0].token_count >= len(chunks[0].content) * 0.9
    assert chunks[0].content.endswith("。")


def test_empty_pages_give_no_chunks():
    assert chunk_pages([ExtractedPage(1, ""), ExtractedPage(2, "   \n\n ")]) == []
