"""Document intelligence in a real browser (#17): a generated invoice PDF uploaded on a note's
page is read, classified and extracted by a real worker; whole-documents search finds it with
its type and thumbnail, and its result opens the split view: the PDF drawn by PDF.js on the
left, the extracted data on the right, at desktop and phone width, under the strict CSP."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from attachments.models import NoteAttachment
from intelligence.models import SourceProfile
from notes.models import Note
from tests.e2e.helpers import login
from tests.fixtures.chat_browser import wait_until_ready
from tests.fixtures.viewer_browser import (  # noqa: F401 - fixtures
    PASSWORD,
    asgi_server,
    assert_page_drawn,
    js_errors,
    note,
    owner,
    shoot,
    viewer_context,
    viewer_page,
    viewer_worker,
)
from tests.intelligence.documents import five_documents
from tests.workers import Worker

pytestmark = pytest.mark.e2e


def test_a_found_invoice_opens_in_the_split_view(
    viewer_page: Page, js_errors: list[str], note: Note, viewer_worker: Worker, tmp_path: Path
) -> None:
    page = viewer_page
    name, data = five_documents()["invoice"]
    invoice = tmp_path / name
    invoice.write_bytes(data)
    login(page, "erin", PASSWORD)
    page.goto(f"/notes/{note.pk}/")
    page.locator("input[data-file-input]").set_input_files(str(invoice))
    wait_until_ready(page.locator("#attachment-list > li[id^='attachment-']"), viewer_worker)
    attachment = NoteAttachment.objects.get(note=note)
    # The profile is asked for after the source is ready (attachments.signals.source_ready,
    # after the guides' receiver), so its row may not exist yet when the list says ready.
    profile = None
    for _ in range(60):
        profile = SourceProfile.objects.filter(attachment=attachment).first()
        if profile is not None and profile.status == "ready":
            break
        page.wait_for_timeout(500)
    assert profile is not None
    assert profile.status == "ready"
    assert profile.doc_type == "invoice"

    page.goto("/search/?q=invoice&mode=documents")
    result = page.locator(".search-document").first
    expect(result).to_contain_text("Invoice")
    thumb = result.locator("img.hit-thumb")
    expect(thumb).to_be_visible()
    result.locator("a.hit-title").click()

    expect(page).to_have_url(f"/sources/{attachment.pk}/")
    split = page.get_by_test_id("split-view")
    expect(split.get_by_test_id("doc-type")).to_contain_text("Invoice")
    expect(split.get_by_test_id("original-name")).to_have_text(name)
    expect(split.get_by_test_id("extracted")).to_be_visible()
    assert split.get_by_test_id("extracted").locator("dt").count() >= 3
    # The parties without their labels or VAT numbers: the vendor names the file too.
    expect(split.get_by_test_id("extracted")).to_contain_text("Northwind Traders AS")
    expect(split.get_by_test_id("suggested-name")).to_contain_text("-acme-consulting-ltd-")
    expect(split.get_by_test_id("display-name")).to_have_text(name)  # until accepted
    assert_page_drawn(page.get_by_test_id("pdf-viewer"), 1)
    shoot(page, "split-view-1366")
    # The document takes the left half of the screen, not a side panel beside a shrunk page.
    assert page.evaluate("document.body.getBoundingClientRect().width") >= 1300
    for width, height in ((1366, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        # On a phone the panel does not cover the screen: the data below it can be reached.
        extracted = split.get_by_test_id("extracted")
        extracted.scroll_into_view_if_needed()
        expect(extracted).to_be_in_viewport()
    shoot(page, "split-view-390")
    # Accepting the suggested name is an explicit action; the file is then shown under it.
    split.get_by_test_id("name-accept").click()
    expect(page.get_by_test_id("display-name")).to_contain_text("-acme-consulting-ltd-")
    expect(page.get_by_test_id("name-revert")).to_be_visible()
    assert js_errors == []
