"""Pages keep their line styles and running heads; `manage.py reindex` re-chunks existing files
from their pages (idempotently); the page-text view dims running heads and footers."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from attachments import services
from attachments.models import NoteAttachment
from tests.attachments.test_pipeline import assert_consistent, ingest
from tests.conftest import EVAL_PDFS, upload
from tests.factories import NotebookFactory, NoteFactory

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
    attachment = ingest(upload(alice, note, "url.pdf"))
    for page in attachment.pages.all():
        assert page.lines
        assert all(size > 0 for _, _, size, _ in page.lines)
        ((start, end),) = page.running
        assert page.text[start:end] == str(page.number)  # the page number at the foot
    assert_consistent(attachment)


def test_reindex_rechunks_existing_files_and_a_second_run_changes_nothing(alice, note):
    attachment = ingest(upload(alice, note, "url.pdf"))
    fixed = chunk_spans(attachment)
    as_before_the_fix(attachment)
    assert chunk_spans(attachment) != fixed

    assert "0 attachment(s) to re-chunk" not in reindex("--dry-run")
    assert attachment.pages.filter(running=[]).count() == 6  # a dry run writes nothing

    output = reindex()
    assert f"url.pdf (#{attachment.pk}): changed" in output
    assert "6 pages with line styles" in output  # read again from the PDF, once
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
    data = (EVAL_PDFS / "url-password-opensesame.pdf").read_bytes()
    attachment = upload(alice, note, "locked.pdf", data)
    services.attachment_submit_password(attachment=attachment, password="opensesame")
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
    attachment = ingest(upload(alice, note, "url.pdf"))
    url = f"/attachments/{attachment.pk}/pages/"
    html = alice_client.get(url).content.decode()
    assert html.count('<span class="running-line" title=') == 6
    assert 'citations">2</span>' in html
    assert 'are <span class="running-line">dimmed</span>' in html  # and the page says why
    text = attachment.pages.get(number=2).text
    quote = " ".join(text.split()[3:12])
    html = alice_client.get(url, {"page": 2, "quote": quote}).content.decode()
    assert '<mark id="quote">' in html
    assert html.count('<span class="running-line" title=') == 6
