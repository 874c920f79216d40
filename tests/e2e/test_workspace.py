"""The notebook workspace in a real browser, over the real socket and a real django-q2 worker:
a PDF dropped on the sources pane becomes a note and goes live to "Ready"; the notebook guide
appears in the empty chat and one of its starter questions starts a conversation; a citation
opens the viewer beside the chat with the quote highlighted; the next question scrolls into
view with the focus back in the composer; Save to note puts the answer in the notes pane, and
the note links back to the PDF page. At 390 px the panes are tabs and nothing overflows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from notes.models import Note
from tests.e2e.helpers import login
from tests.fixtures.chat_browser import (  # noqa: F401 - fixtures, shared
    ANSWER_TIMEOUT,
    PASSWORD,
    asgi_server,
    chat_context,
    chat_page,
    errors,
    note,
    shoot,
    wait_until_ready,
)
from tests.fixtures.documents import SAMPLES
from tests.workers import Worker, run_worker

pytestmark = pytest.mark.e2e

GUIDE_TIMEOUT = 180_000  # ms for the notebook guide after "Ready"
SECOND = "How do I upload the finished site to my web server?"  # manual.pdf's page 3


@pytest.fixture
def worker(transactional_db, tmp_path: Path) -> Iterator[Worker]:
    """test_chat's worker, writing the notebook guide as soon as a source is ready. With the
    default debounce (GUIDE_NOTEBOOK_DELAY) the run is a django-q Schedule, which the cluster
    looks at only every 30 s: up to half a minute of waiting here. The debounce itself is
    tested in tests/guides/test_guides.py."""
    with run_worker(log=tmp_path / "qcluster.log", GUIDE_NOTEBOOK_DELAY="0") as running:
        yield running


def no_overflow(page: Page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_sources_chat_and_notes_on_one_screen(
    chat_page: Page, errors: list[str], note: Note, worker: Worker
) -> None:
    page = chat_page
    page.set_viewport_size({"width": 1366, "height": 900})
    notebook = note.notebook
    login(page, "erin", PASSWORD)
    page.goto(f"/notebooks/{notebook.pk}/")
    expect(page.get_by_role("heading", name="Sources")).to_be_visible()
    expect(page.get_by_role("heading", name="Notes", exact=True)).to_be_visible()

    # Add a source: dropped (here: chosen) files become notes titled after the file.
    page.locator("[data-testid=add-sources] input[data-file-input]").set_input_files(
        str(SAMPLES / "manual.pdf")
    )
    row = page.locator("#source-list-new > li[id^='source-']")
    wait_until_ready(row, worker)
    assert Note.objects.filter(notebook=notebook, title="manual").exists()

    # The notebook guide appears at the top of the empty chat, written by the worker; its
    # suggested questions are starter chips.
    page.reload()
    guide = page.get_by_test_id("notebook-guide")
    expect(guide).to_have_attribute("data-status", "ready", timeout=GUIDE_TIMEOUT)
    expect(guide).to_contain_text("manual.pdf")
    starter = page.get_by_test_id("starter").first
    expect(starter).to_be_visible()
    asked = starter.inner_text()

    # A starter asks its question and starts a conversation (plain post: none to connect to).
    starter.click()
    first = page.locator("article.message-assistant").nth(0)
    expect(first).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    expect(page.locator("article.message-user").nth(0)).to_contain_text(asked)
    expect(page.locator("#chat")).to_have_attribute("data-socket", "open")

    # Its citation opens the viewer beside the chat, at the cited page, the quote highlighted.
    chip = first.get_by_test_id("citation-chip").first
    expect(chip).to_be_visible()
    chip.click()
    panel = page.get_by_test_id("pdf-viewer")
    expect(panel).to_be_visible()
    expect(panel.get_by_test_id("viewer-sheet")).to_have_attribute(
        "data-rendered", "true", timeout=30_000
    )
    assert panel.get_attribute("data-page") == chip.get_attribute("data-viewer-page")
    expect(panel.locator(".textLayer .pdf-viewer-highlight").first).to_be_visible()
    expect(page.locator("#pane-chat")).to_be_visible()
    shoot(page, "workspace-1366-viewer")
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()

    # The next one goes over the socket: it scrolls into view, focus comes back.
    composer = page.get_by_label("Your question", exact=True)
    composer.fill(SECOND)
    composer.press("Enter")
    second = page.locator("article.message-assistant").nth(1)
    expect(second).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    expect(second).to_be_in_viewport()
    expect(page.get_by_label("Your question", exact=True)).to_be_focused()
    expect(page.get_by_label("Your question", exact=True)).to_have_value("")

    # Save to note: a new note in the notes pane, linking back to the PDF's page.
    second.get_by_test_id("save-to-note").click()
    expect(second.get_by_test_id("saved")).to_contain_text("Saved to")
    notes_pane = page.locator("#pane-notes")
    expect(notes_pane.locator(".note-title", has_text=SECOND[:40])).to_be_visible()
    saved = Note.objects.get(notebook=notebook, title__startswith=SECOND[:40])
    assert "/file/#page=" in saved.body
    shoot(page, "workspace-1366")
    no_overflow(page)
    # The new note's field shows its whole placeholder ("Title of the new nc" was clipped).
    assert page.evaluate("""() => {
        const field = document.querySelector('#pane-notes .new-note input[name=title]');
        const style = getComputedStyle(field);
        const pen = document.createElement('canvas').getContext('2d');
        pen.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
        const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
        return pen.measureText(field.placeholder).width + padding <= field.clientWidth;
    }""")

    # The saved note links back to the PDF at the cited page.
    with page.context.expect_page() as opened:
        notes_pane.locator(".note-title", has_text=SECOND[:40]).click(modifiers=["Control"])
    note_page = opened.value
    back = note_page.locator("#note-body a[href*='/file/#page=']").first
    expect(back).to_be_visible()
    expect(back).to_contain_text("manual.pdf, page")
    note_page.close()

    # A reload opens the conversation at its end.
    page.reload()
    expect(page.locator("article.message-assistant").nth(1)).to_be_in_viewport()

    # On a phone: tabs, one pane at a time, nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    tabs = page.get_by_role("tablist", name="Workspace panes")
    expect(tabs).to_be_visible()
    expect(page.locator("#pane-chat")).to_be_visible()
    expect(page.locator("#pane-sources")).to_be_hidden()
    shoot(page, "workspace-390-chat")
    no_overflow(page)
    # The notebook's title and its actions sit together, without a blank band between them.
    gap = page.evaluate(
        "document.querySelector('.workspace-head .actions').getBoundingClientRect().top"
        " - document.querySelector('.workspace-head h1').getBoundingClientRect().bottom"
    )
    assert gap <= 16, f"{gap} px between the title and its actions"
    tabs.get_by_role("tab", name="Sources").click()
    expect(page.locator("#pane-sources")).to_be_visible()
    expect(page.locator("#pane-chat")).to_be_hidden()
    shoot(page, "workspace-390-sources")
    no_overflow(page)
    tabs.get_by_role("tab", name="Notes").click()
    expect(page.locator("#pane-notes")).to_be_visible()
    no_overflow(page)
    assert errors == []
