"""Choosing sources in a real browser (issue #16): `@` / `@@` in the composer suggest sources,
a pick becomes a chip (the token goes, the cursor stays), the sources pane's boxes follow the
chips, folders warn above 15 sources and are refused above 200; a question with a chip is
answered from that source only, an unticked source is not cited by the next answer, and
"Ask this PDF" opens a conversation titled after the file. The offline extractive answerer
writes the answers (no chat model is configured), over the real socket under daphne."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.urls import NoReverseMatch, reverse
from playwright.sync_api import Page, expect

from chat.models import Conversation, Message
from notes.services import note_create, notebook_create
from tests.e2e.helpers import login
from tests.factories import NoteFactory
from tests.fixtures.chat_browser import (  # noqa: F401 - fixtures, shared
    ANSWER_TIMEOUT,
    PASSWORD,
    asgi_server,
    chat_context,
    chat_page,
    errors,
    shoot,
)
from tests.fixtures.documents import ingest, upload

pytestmark = pytest.mark.e2e


def _ask_pdf_exists() -> bool:
    try:
        reverse("chat:ask_pdf", args=[1])
    except NoReverseMatch:
        return False
    return True


@dataclass
class Library:
    notebook_id: int
    wildlife_note: int
    baking_note: int
    text_pdf: int
    other_pdf: int


@pytest.fixture
def library(transactional_db) -> Library:
    """Fay's notebook "Field notes" with two notes, each with an ingested sample PDF (text.pdf
    about wildlife, other.pdf about bread); two more notebooks, one over the warning threshold
    (16 notes), one over the maximum (201 notes)."""
    fay = User.objects.create_user(username="fay", password=PASSWORD)
    notebook = notebook_create(owner=fay, title="Field notes")
    # Written notes (a note that only holds a file is listed as its file alone, no note box).
    wildlife = note_create(notebook=notebook, author=fay, title="Wildlife", body="Reading list.")
    baking = note_create(notebook=notebook, author=fay, title="Baking", body="To check.")
    text_pdf = ingest(upload(fay, wildlife, "text.pdf"))
    other_pdf = ingest(upload(fay, baking, "other.pdf"))
    assert text_pdf.status == "ready", text_pdf.error
    assert other_pdf.status == "ready", other_pdf.error
    for title, count in (("Shelf warn", 16), ("Shelf huge", 201)):
        shelf = notebook_create(owner=fay, title=title)
        NoteFactory.create_batch(count, notebook=shelf, author=fay, title="Scrap")
    return Library(notebook.pk, wildlife.pk, baking.pk, text_pdf.pk, other_pdf.pk)


def composer(page: Page):
    return page.get_by_label("Your question", exact=True)


def listbox(page: Page):
    return page.get_by_role("listbox", name="Sources to mention")


def folder(page: Page, name: str):
    return listbox(page).locator(".mention-option[data-kind=folder]", has_text=name)


def box(page: Page, ref: str):
    return page.locator(f".source-check[data-source-ref='{ref}']")


def test_mentions_become_chips_and_boxes_follow(
    chat_page: Page, errors: list[str], library: Library
) -> None:
    page = chat_page
    page.set_viewport_size({"width": 1366, "height": 900})
    login(page, "fay", PASSWORD)
    page.goto(f"/notebooks/{library.notebook_id}/")

    # The token rules, on the functions the composer uses.
    token = "window.NotebookComposer.activeToken"
    assert page.evaluate(f"{token}('write to me@x', 13)") is None  # inside another token
    assert page.evaluate(f"{token}('no mention here', 7)") is None
    assert page.evaluate(f"{token}('see @@url more', 9)") == {
        "start": 4, "end": 9, "term": "url", "everything": True,
    }  # fmt: skip
    assert page.evaluate(f"{token}('@cit', 2)") == {
        "start": 0, "end": 4, "term": "c", "everything": False,
    }  # fmt: skip
    assert page.evaluate(
        "window.NotebookComposer.removeToken('see @@url more', {start: 4, end: 9})"
    ) == {"text": "see more", "cursor": 4}
    assert page.evaluate(
        "window.NotebookComposer.removeToken('see @@url', {start: 4, end: 9})"
    ) == {"text": "see ", "cursor": 4}

    # With nothing chosen every source is ticked.
    summary = page.get_by_test_id("selection-summary")
    expect(summary).to_have_text("All sources")
    for ref in (f"attachment:{library.text_pdf}", f"note:{library.baking_note}"):
        expect(box(page, ref)).to_be_checked()

    # `@` offers the notebook's notes; an address is not a mention.
    field = composer(page)
    field.click()
    field.press_sequentially("mail me@x")
    page.wait_for_timeout(400)
    expect(listbox(page)).to_be_hidden()
    field.fill("")
    field.press_sequentially("Explain @")
    options = listbox(page).get_by_role("option")
    expect(options).to_have_count(2)
    expect(listbox(page)).to_contain_text("Wildlife")
    expect(listbox(page)).to_contain_text("Field notes / Baking")  # the path line
    expect(field).to_have_attribute("aria-expanded", "true")
    expect(field).to_have_attribute("aria-activedescendant", "mention-option-0")
    field.press("ArrowDown")
    expect(field).to_have_attribute("aria-activedescendant", "mention-option-1")
    field.press("Escape")  # closes, keeps the text
    expect(listbox(page)).to_be_hidden()
    expect(field).to_have_value("Explain @")

    # `@@` reaches PDFs and folders; Enter picks instead of sending.
    field.press_sequentially("@text.p")
    expect(options.first).to_contain_text("text.pdf")
    expect(options.first).to_contain_text("Field notes / Wildlife / text.pdf")
    shoot(page, "selection-1366-mentions")
    field.press("Enter")
    chip = page.get_by_test_id("selection-chip")
    expect(chip).to_have_count(1)
    expect(chip).to_contain_text("text.pdf")
    expect(field).to_have_value("Explain ")
    assert page.evaluate("document.activeElement.selectionStart") == len("Explain ")
    assert not Message.objects.exists()  # Enter picked, it did not send
    expect(summary).to_have_text("Answering from 1 selected source")
    expect(box(page, f"attachment:{library.text_pdf}")).to_be_checked()
    expect(box(page, f"attachment:{library.other_pdf}")).not_to_be_checked()
    expect(box(page, f"note:{library.wildlife_note}")).not_to_be_checked()

    # Ticking a box adds its chip; unticking a chip's box removes it and excludes it.
    box(page, f"note:{library.baking_note}").check()
    expect(chip).to_have_count(2)
    expect(summary).to_have_text("Answering from 2 selected sources")
    box(page, f"note:{library.baking_note}").uncheck()
    expect(chip).to_have_count(1)
    state = page.evaluate("window.NotebookComposer.state()")
    assert [s["ref"] for s in state["selections"]] == [f"attachment:{library.text_pdf}"]
    assert state["selections"][0]["kind"] == "file"
    assert state["selections"][0]["mode"] == "all"
    assert state["excluded"] == [f"note:{library.baking_note}"]
    hidden = page.locator("#ask-form input[name=selections]").input_value()
    assert f"attachment:{library.text_pdf}" in hidden

    # Folders: over 15 sources a warning, over 200 refused (no chip).
    field.press_sequentially("@@shelf")
    expect(listbox(page)).to_contain_text("Shelf huge (201)")
    folder(page, "Shelf huge").click()
    notice = page.locator("#ask-form [data-notice]")
    expect(notice).to_contain_text("more than 200")
    expect(chip).to_have_count(1)
    expect(field).to_have_value("Explain ")  # the token went all the same
    field.press_sequentially(" @@shelf")
    folder(page, "Shelf warn").click()
    expect(chip).to_have_count(2)
    expect(chip.nth(1)).to_contain_text("Shelf warn (16)")
    expect(notice).to_contain_text("16 sources")
    shoot(page, "selection-1366-chips")

    # Removing a chip excludes its source; with no chips the rest stays ticked.
    page.get_by_role("button", name="Remove Shelf warn (16)").click()
    page.get_by_role("button", name="Remove text.pdf").click()
    expect(chip).to_have_count(0)
    expect(box(page, f"attachment:{library.text_pdf}")).not_to_be_checked()
    expect(box(page, f"attachment:{library.other_pdf}")).to_be_checked()
    expect(summary).to_have_text("All sources but 2")  # text.pdf and the Baking note
    box(page, f"attachment:{library.text_pdf}").check()
    expect(summary).to_have_text("All sources but 1")

    # At 390 px: the chat tab with a chip and the list open, nothing overflowing.
    page.set_viewport_size({"width": 390, "height": 844})
    field.press_sequentially("@@bak")
    expect(listbox(page)).to_be_visible()
    field.press("Enter")
    expect(chip).to_have_count(1)
    field.press_sequentially(" @")
    expect(listbox(page)).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    box_ = listbox(page).bounding_box()
    assert box_ is not None
    assert box_["x"] >= 0
    assert box_["x"] + box_["width"] <= 390
    shoot(page, "selection-390-mentions")
    field.press("Escape")
    expect(chip).to_be_visible()
    chip_box = chip.bounding_box()
    assert chip_box is not None
    assert chip_box["x"] + chip_box["width"] <= 390
    shoot(page, "selection-390-chips")
    page.get_by_role("tab", name="Sources").click()
    shoot(page, "selection-390-sources")
    assert errors == []


def _cited_attachments(message: Message) -> set[int]:
    return {c["attachment_id"] for c in message.citations or [] if c.get("attachment_id")}


def test_a_chip_scopes_the_answer_and_an_unticked_source_is_not_cited(
    chat_page: Page, errors: list[str], library: Library
) -> None:
    page = chat_page
    page.set_viewport_size({"width": 1366, "height": 900})
    login(page, "fay", PASSWORD)
    page.goto(f"/notebooks/{library.notebook_id}/")
    field = composer(page)
    field.click()
    field.press_sequentially("@@other")
    field.press("Enter")  # before the suggestions arrive: it waits for them, it does not send
    expect(listbox(page).get_by_role("option").first).to_contain_text("other.pdf")
    assert not Message.objects.exists()
    field.press("Enter")
    # Over the whole notebook this is answered from text.pdf ("Volunteers record every
    # sighting", "early morning"); other.pdf answers it too ("every morning").
    field.press_sequentially("What is recorded every morning?")
    field.press("Enter")  # the first question of the workspace: a plain post
    first = page.locator("article.message-assistant").nth(0)
    expect(first).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    answer = Message.objects.filter(role="assistant").get()
    # Both PDFs speak of mornings, but only other.pdf was chosen: cited from it, not text.pdf.
    assert _cited_attachments(answer) == {library.other_pdf}
    expect(page.get_by_test_id("chosen-sources")).to_contain_text("other.pdf")
    # The chip is still there after sending (and the page load that followed).
    chip = page.get_by_test_id("selection-chip")
    expect(chip).to_have_count(1)
    expect(chip).to_contain_text("other.pdf")
    expect(page.locator("#chat")).to_have_attribute("data-socket", "open")

    # Remove the chip, untick text.pdf: the next answer (over the socket) does not cite it.
    page.get_by_role("button", name="Remove other.pdf").click()
    box(page, f"attachment:{library.other_pdf}").check()
    box(page, f"attachment:{library.text_pdf}").uncheck()
    expect(page.get_by_test_id("selection-summary")).to_have_text("All sources but 1")
    field = composer(page)
    field.fill("Where does the grey heron wait motionless until dusk?")
    field.press("Enter")
    second = page.locator("article.message-assistant").nth(1)
    expect(second).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    latest = Message.objects.filter(role="assistant").order_by("-pk").first()
    assert latest is not None
    assert library.text_pdf not in _cited_attachments(latest)
    # The boxes and the summary survived the form the socket sent back.
    expect(box(page, f"attachment:{library.text_pdf}")).not_to_be_checked()
    expect(page.get_by_test_id("selection-summary")).to_have_text("All sources but 1")
    shoot(page, "selection-1366-answered")
    assert errors == []


@pytest.mark.skipif(not _ask_pdf_exists(), reason="needs chat:ask_pdf (the server half of #16)")
def test_ask_this_pdf_opens_a_conversation_titled_after_the_file(
    chat_page: Page, errors: list[str], library: Library
) -> None:
    page = chat_page
    login(page, "fay", PASSWORD)
    page.goto(f"/notebooks/{library.notebook_id}/")
    row = page.locator(f"#source-{library.text_pdf}")
    row.locator("summary").click()
    row.get_by_role("button", name="Ask this PDF").click()
    expect(page.locator("#conversation-title")).to_contain_text("text.pdf")
    conversation = Conversation.objects.get()
    assert "text.pdf" in conversation.title
    # And from the note's own page.
    page.goto(f"/notes/{library.baking_note}/")
    page.locator(f"#attachment-{library.other_pdf}").get_by_role(
        "button", name="Ask this PDF"
    ).click()
    expect(page.locator("#conversation-title")).to_contain_text("other.pdf")
    assert Conversation.objects.count() == 2
    assert errors == []
