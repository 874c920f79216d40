"""An image source in a real browser (#17): uploaded on a note's page, OCR'd by a real worker,
shown with its thumbnail; a citation of it opens the image itself in the side panel (no PDF.js),
the quote as text under it, under the strict CSP."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from chat.models import Message
from notes.models import Note
from tests.e2e.helpers import login
from tests.fixtures.chat_browser import ANSWER_TIMEOUT, wait_until_ready
from tests.fixtures.documents import text_image
from tests.fixtures.viewer_browser import (  # noqa: F401 - fixtures
    PASSWORD,
    asgi_server,
    js_errors,
    note,
    owner,
    shoot,
    viewer_context,
    viewer_page,
    viewer_worker,
)
from tests.workers import Worker

pytestmark = pytest.mark.e2e


def test_a_citation_of_an_image_opens_the_image_in_the_side_panel(
    viewer_page: Page, js_errors: list[str], note: Note, viewer_worker: Worker, tmp_path: Path
) -> None:
    page = viewer_page
    picture = tmp_path / "heron-survey.png"
    picture.write_bytes(text_image())
    login(page, "erin", PASSWORD)
    page.goto(f"/notes/{note.pk}/")
    page.locator("input[data-file-input]").set_input_files(str(picture))
    row = page.locator("#attachment-list > li[id^='attachment-']")
    wait_until_ready(row, viewer_worker)
    thumb = row.get_by_test_id("source-thumb")
    expect(thumb).to_be_visible()
    thumb.evaluate(
        "(img) => img.complete ? null : new Promise((done) => img.addEventListener('load', done))"
    )
    assert thumb.evaluate("(img) => img.naturalWidth") > 0

    page.get_by_role("button", name="Ask about this note’s PDFs", exact=True).click()
    expect(page.locator("#chat")).to_have_attribute("data-socket", "open")
    question = page.get_by_label("Your question", exact=True)
    question.fill("When did the heron wait by the millpond?")
    question.press("Enter")
    answer = page.locator("article.message-assistant")
    expect(answer).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    saved = Message.objects.get(role="assistant")
    assert saved.citations, saved.content
    assert {int(c["page"]) for c in saved.citations if c.get("kind") == "document"} == {1}

    source = answer.get_by_test_id("source-link").first
    expect(source).to_have_attribute("data-viewer-image", "1")
    source.click()
    panel = page.get_by_test_id("pdf-viewer")
    expect(panel).to_be_visible()
    expect(panel).to_have_attribute("data-kind", "image")
    image = panel.get_by_test_id("viewer-image")
    expect(image).to_have_attribute("data-rendered", "true", timeout=15_000)
    assert image.evaluate("(img) => img.naturalWidth") == 1000
    expect(panel.get_by_test_id("viewer-sheet")).to_be_hidden()
    expect(panel.get_by_test_id("viewer-image-quote")).to_have_text(saved.citations[0]["quote"])
    expect(panel.get_by_test_id("viewer-quote")).to_be_hidden()  # not twice
    expect(panel.get_by_test_id("viewer-count")).to_have_text("Page 1 of 1")
    expect(panel.get_by_test_id("viewer-prev")).to_be_disabled()
    shoot(page, "image-citation-viewer")
    assert js_errors == []

    # Back on the note's page, the row shows the thumbnail.
    page.goto(f"/notes/{note.pk}/")
    expect(row.get_by_test_id("source-thumb")).to_be_visible()
    row.screenshot(
        path=str(
            Path(__file__).resolve().parents[2]
            / "test-artifacts"
            / "screenshots"
            / "image-row-thumbnail.png"
        )
    )
