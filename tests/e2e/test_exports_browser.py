"""Exports in Chromium against the real application under daphne (ASGI: the ZIP is streamed
by the async path): the notebook's Export menu downloads a ZIP that opens with its notes,
conversation and original file; a conversation downloads as Markdown; Settings offers all of
one's data and deletes the account. Screenshots at 1366 and 390 px wide."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, ViewportSize, expect

from chat.models import Conversation, Message
from notes.services import note_create, notebook_create
from tests.e2e.conftest import SCREENSHOTS, PageProblems
from tests.e2e.helpers import login, path_is
from tests.fixtures.documents import text_pdf, upload

pytestmark = pytest.mark.e2e

PASSWORD = "a long enough password"
PHONE: ViewportSize = {"width": 390, "height": 844}
DESKTOP: ViewportSize = {"width": 1366, "height": 900}
BODY = "# Heron\n\nWaits by the pond until *dusk*.\n"


@pytest.fixture
def dana(transactional_db) -> dict[str, Any]:
    user = User.objects.create_user(username="dana", password=PASSWORD)
    book = notebook_create(owner=user, title="Field notes / 2024")
    note_create(notebook=book, author=user, title="Heron", body=BODY)
    note = note_create(notebook=book, author=user, title="Survey")
    source = upload(user, note, "survey.pdf", text_pdf(["The heron waited by the millpond."]))
    chat = Conversation.objects.create(owner=user, notebook=book, title="Herons")
    question = Message.objects.create(conversation=chat, role="user", content="Where?")
    citation = {"n": 1, "kind": "document", "attachment_id": source.pk, "file": "survey.pdf",
                "page": 1, "chunk_id": 1, "quote": "The heron waited by the millpond."}  # fmt: skip
    Message.objects.create(
        conversation=chat, role="assistant", content="By the millpond [1].", reply_to=question,
        citations=[citation], answerer="llm",
    )  # fmt: skip
    return {"book": book, "source": Path(source.file.path), "chat": chat}


def _shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)


def _no_overflow(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    viewport = page.viewport_size
    assert viewport is not None
    assert width <= viewport["width"], f"{page.url} scrolls sideways ({width} px)"


def test_a_notebook_export_downloads_from_the_workspace_and_opens(
    site_page: Page, site_problems: PageProblems, dana, tmp_path
):
    page = site_page
    login(page, "dana", PASSWORD)
    page.goto(f"/notebooks/{dana['book'].pk}/")
    menu = page.get_by_test_id("export-menu")
    menu.locator("summary").click()
    expect(page.get_by_test_id("export-originals")).to_be_visible()
    _shot(page, "export-menu-1366")

    with page.expect_download() as info:
        page.get_by_test_id("export-originals").click()
    download = info.value
    assert download.suggested_filename == "Field notes _ 2024.zip"
    saved = tmp_path / "export.zip"
    download.save_as(saved)

    with zipfile.ZipFile(saved) as archive:
        assert archive.testzip() is None
        heron = archive.read("notes/Heron.md").decode()
        assert heron.endswith("\n---\n\n" + BODY)
        assert archive.read("sources/survey.pdf") == dana["source"].read_bytes()
        chat = archive.read("conversations/Herons.md").decode()
        assert "By the millpond [^1]." in chat
        assert "[^1]: survey.pdf, page 1: “The heron waited by the millpond.”" in chat
        assert "`sources/survey.pdf`" in archive.read("README.md").decode()

    page.set_viewport_size(PHONE)
    page.reload()
    page.get_by_test_id("export-menu").locator("summary").click()
    box = page.locator(".export-options").bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= PHONE["width"]
    _no_overflow(page)
    _shot(page, "export-menu-390")
    page.goto("/")  # each row of the notebook list has the menu too
    page.get_by_test_id("export-menu").locator("summary").click()
    box = page.locator(".export-options").bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= PHONE["width"]
    _no_overflow(page)
    _shot(page, "export-list-390")
    assert site_problems.take() == []


def test_a_conversation_downloads_as_markdown(
    site_page: Page, site_problems: PageProblems, dana, tmp_path
):
    page = site_page
    login(page, "dana", PASSWORD)
    page.goto(f"/chats/{dana['chat'].pk}/")
    with page.expect_download() as info:
        page.get_by_test_id("export-conversation").click()
    download = info.value
    assert download.suggested_filename == "Herons.md"
    saved = tmp_path / "chat.md"
    download.save_as(saved)
    assert "[^1]: survey.pdf, page 1:" in saved.read_text()
    assert site_problems.take() == []


def test_settings_export_everything_then_delete_the_account(
    site_page: Page, site_problems: PageProblems, dana, tmp_path
):
    page = site_page
    login(page, "dana", PASSWORD)
    for viewport, width in ((DESKTOP, 1366), (PHONE, 390)):
        page.set_viewport_size(viewport)
        page.goto("/settings/")
        expect(page.get_by_test_id("your-data")).to_be_visible()
        _no_overflow(page)
        _shot(page, f"export-settings-{width}")
    with page.expect_download() as info:
        page.get_by_test_id("export-all").click()
    saved = tmp_path / "all.zip"
    info.value.save_as(saved)
    with zipfile.ZipFile(saved) as archive:
        assert "account.json" in archive.namelist()
        prefix = "notebooks/Field notes _ 2024/"
        assert archive.read(prefix + "sources/survey.pdf") == dana["source"].read_bytes()

    page.get_by_test_id("delete-account-link").click()
    expect(page.get_by_test_id("account-holdings")).to_contain_text("1 notebook you own")
    _no_overflow(page)
    _shot(page, "export-account-delete-390")
    page.set_viewport_size(DESKTOP)
    page.get_by_label("Your password").fill("not it")
    page.get_by_test_id("delete-account").click()
    expect(page.get_by_role("alert")).to_contain_text("That is not your password.")
    _shot(page, "export-account-delete-1366")
    page.get_by_label("Your password").fill(PASSWORD)
    page.get_by_test_id("delete-account").click()
    expect(page).to_have_url(path_is("/accounts/login/"))
    expect(page.get_by_text("everything it owned are deleted")).to_be_visible()
    _shot(page, "export-account-deleted-1366")
    assert not User.objects.filter(username="dana").exists()
    assert not dana["source"].exists()  # its file went with the commit
    # The 400 of the wrong password is the one problem the page was meant to show.
    assert [p for p in site_problems.take() if "400" not in p] == []
