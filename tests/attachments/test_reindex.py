"""Pages keep their line styles and running heads; `manage.py reindex` re-chunks existing files
from their pages (idempotently) and drops glyph codes ("(cid:13)") from pages stored with them;
the page-text view dims running heads and footers."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from attachments import services
from attachments.models import NoteAttachment
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import (
    SAMPLE_PASSWORD,
    assert_consistent,
    ingest,
    one_page,
    pdf,
    sample,
    stream,
    upload,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def note(alice):
    return NoteFactory.create(notebook=NotebookFactory.create(owner=alice))


def chunk_spans(attachment: NoteAttachment) -> list[tuple[int, int, int, list[str]]]:
    return [
        (c.page_number, c.start_char, c.end_char, c.heading_path)
        for c in attachment.chunks.order_by("index")
    ]


def reindex(*args: str) -> str:
    out = StringIO()
    call_command("reindex", *args, stdout=out)
    return out.getvalue()


def as_before_the_fix(attachment: NoteAttachment) -> None:
    """What an install from before running heads were found holds: pages without line styles
    or running heads, and chunks that run on into the page number at the foot of the page."""
    attachment.pages.update(lines=[], running=[])
    for page in attachment.pages.all():
        last = attachment.chunks.filter(page_number=page.number).order_by("-index").first()
        assert last is not None
        last.end_char = len(page.text)
        last.content = page.text[last.start_char :]
        last.save()


def test_pages_keep_line_styles_and_running_heads(alice, note):
    attachment = ingest(upload(alice, note, "text.pdf"))
    for page in attachment.pages.all():
        assert page.lines
        assert all(size > 0 for _, _, size, _ in page.lines)
        ((start, end),) = page.running
        assert page.text[start:end] == str(page.number)  # the page number at the foot
    assert_consistent(attachment)


def test_reindex_rechunks_existing_files_and_a_second_run_changes_nothing(alice, note):
    attachment = ingest(upload(alice, note, "text.pdf"))
    fixed = chunk_spans(attachment)
    as_before_the_fix(attachment)
    assert chunk_spans(attachment) != fixed

    assert "0 attachment(s) to re-chunk" not in reindex("--dry-run")
    assert attachment.pages.filter(running=[]).count() == 3  # a dry run writes nothing

    output = reindex()
    assert f"text.pdf (#{attachment.pk}): changed" in output
    assert "3 pages with line styles" in output  # read again from the PDF, once
    attachment.refresh_from_db()
    assert attachment.status == "ready"
    assert chunk_spans(attachment) == fixed
    assert not attachment.pages.filter(running=[]).exists()
    assert not attachment.pages.filter(lines=[]).exists()
    assert_consistent(attachment)  # every new chunk embedded, offsets into the page text

    vectors = sorted(attachment.chunks.values_list("vectors__pk", flat=True))
    output = reindex(str(attachment.pk))
    assert "unchanged" in output
    assert "0 attachment(s) re-chunked, 1 unchanged." in output
    assert sorted(attachment.chunks.values_list("vectors__pk", flat=True)) == vectors


def test_reindex_without_the_pdf_password_finds_heads_by_text_alone(alice, note):
    data = sample("locked.pdf")
    attachment = upload(alice, note, "locked.pdf", data)
    services.attachment_submit_password(attachment=attachment, password=SAMPLE_PASSWORD)
    attachment = ingest(attachment)
    assert attachment.status == "ready"
    as_before_the_fix(attachment)

    output = reindex()
    assert "changed" in output
    assert "0 pages with line styles" in output  # the unlocked copy is gone: no styles
    attachment.refresh_from_db()
    assert attachment.status == "ready"
    for page in attachment.pages.all():
        ((start, end),) = page.running  # page numbers follow the pages: found without fonts
        assert page.text[start:end] == str(page.number)
        for chunk in attachment.chunks.filter(page_number=page.number):
            assert chunk.end_char <= start
    assert_consistent(attachment)


def test_page_text_view_dims_running_heads_and_still_marks_quotes(alice_client, alice, note):
    attachment = ingest(upload(alice, note, "text.pdf"))
    url = f"/attachments/{attachment.pk}/pages/"
    html = alice_client.get(url).content.decode()
    assert html.count('<span class="running-line" title=') == 3
    assert 'citations">2</span>' in html
    assert 'are <span class="running-line">dimmed</span>' in html  # and the page says why
    text = attachment.pages.get(number=2).text
    quote = " ".join(text.split()[3:12])
    html = alice_client.get(url, {"page": 2, "quote": quote}).content.decode()
    assert '<mark id="quote">' in html
    assert html.count('<span class="running-line" title=') == 3


# --- Glyph codes: a font without a Unicode map for some of its codes (TeX's symbol fonts), which
# pdfminer writes as "(cid:NN)". Here Helvetica in StandardEncoding, which leaves 8, 9, 13 and
# 14 undefined.

GLYPH_FONT = (
    b"<< /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica "
    b"/Encoding << /Type /Encoding /BaseEncoding /StandardEncoding >> >> >> >>"
)
GLYPH_PAGE = (
    rb"BT /F1 12 Tf 72 720 Td (The command \010urldef\011 breaks long addresses at slashes.) Tj "
    rb"0 -200 Td (Copyright c\015 2000 the authors \016.) Tj ET"
)
CLEAN = [
    "The command urldef breaks long addresses at slashes.",
    "Copyright c 2000 the authors.",
]
# What extraction stored before it dropped the codes.
STORED_BEFORE = [
    "The command (cid:8)urldef(cid:9) breaks long addresses at slashes.",
    "Copyright c(cid:13) 2000 the authors (cid:14).",
]


def glyph_code_pdf() -> bytes:
    return pdf(*one_page(4, GLYPH_FONT), stream(GLYPH_PAGE))


def line_texts(page) -> list[str]:
    return [page.text[start:end] for start, end, _, _ in page.lines]


def test_glyph_codes_of_unmapped_characters_are_dropped_at_extraction(alice, note):
    attachment = ingest(upload(alice, note, "symbols.pdf", glyph_code_pdf()))
    assert attachment.status == "ready", attachment.error
    page = attachment.pages.get()
    assert line_texts(page) == CLEAN
    assert "(cid:" not in page.text
    assert not attachment.chunks.filter(content__contains="(cid:").exists()
    assert_consistent(attachment)


def test_reindex_drops_glyph_codes_from_pages_stored_with_them(alice, note):
    attachment = ingest(upload(alice, note, "symbols.pdf", glyph_code_pdf()))
    page = attachment.pages.get()
    styles = [line[2:] for line in page.lines]
    second = len(STORED_BEFORE[0]) + 2
    page.text = "\n\n".join(STORED_BEFORE)
    page.lines = [[0, len(STORED_BEFORE[0]), *styles[0]],
                  [second, second + len(STORED_BEFORE[1]), *styles[1]]]  # fmt: skip
    page.save()
    attachment.chunks.update(start_char=0, end_char=len(page.text), content=page.text)

    assert "0 pages" not in reindex("--dry-run")
    assert "(cid:" in attachment.pages.get().text  # a dry run writes nothing

    output = reindex()
    assert f"symbols.pdf (#{attachment.pk}): changed" in output
    assert "glyph codes dropped on 1 pages" in output
    page = attachment.pages.get()
    assert line_texts(page) == CLEAN  # each line keeps its characters and its style
    assert [line[2:] for line in page.lines] == styles
    assert not attachment.chunks.filter(content__contains="(cid:").exists()
    assert_consistent(attachment)  # re-embedded, offsets into the cleaned text

    assert "0 attachment(s) re-chunked, 1 unchanged." in reindex()
