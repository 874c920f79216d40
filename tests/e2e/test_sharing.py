"""Sharing in a real browser (#34): the owner opens the Share dialog in the workspace, shares
the notebook with another user as viewer; the viewer finds it under "Shared with me", sees no
way to change it, asks in a conversation of their own and gets a cited answer over the real
socket; the owner never sees that conversation; revoking ends the viewer's access at once.
At 1366 and 390 px, under the app's own CSP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect

from chat.models import Conversation
from notes.models import NotebookMembership
from notes.services import note_create, notebook_create
from tests.e2e.helpers import field, login
from tests.fixtures.chat_browser import (  # noqa: F401 - fixtures, shared
    ANSWER_TIMEOUT,
    PASSWORD,
    asgi_server,
    chat_context,
    chat_page,
    errors,
    shoot,
)
from tests.workers import Worker, run_worker

pytestmark = pytest.mark.e2e

QUESTION = "Where do new staff collect their badges?"


@pytest.fixture
def worker(transactional_db, tmp_path: Path) -> Iterator[Worker]:
    with run_worker(log=tmp_path / "qcluster.log") as running:
        yield running


@pytest.fixture
def handbook(transactional_db):
    erin = User.objects.create_user(username="erin", password=PASSWORD)
    User.objects.create_user(username="frank", email="frank@example.org", password=PASSWORD)
    notebook = notebook_create(owner=erin, title="Team handbook")
    note_create(
        notebook=notebook,
        author=erin,
        title="Onboarding",
        body="# First day\n\nNew staff collect their badges at the front desk on the fourth "
        "floor, from nine in the morning. Bring a photo ID.\n\n# Laptops\n\nLaptops are "
        "handed out by IT in room 12 after the badge is ready.",
    )
    return notebook


def no_overflow(page: Page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_share_then_the_viewer_asks_privately_and_loses_access_when_revoked(
    chat_page: Page, errors: list[str], browser: Browser, asgi_server: str, handbook, worker
) -> None:
    page = chat_page
    login(page, "erin", PASSWORD)
    page.goto(f"/notebooks/{handbook.pk}/")
    page.get_by_test_id("share-open").click()
    dialog = page.get_by_test_id("share-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_test_id("no-members")).to_be_visible()
    field(dialog, "Username or email").fill("nobody")
    dialog.get_by_role("button", name="Share", exact=True).click()
    expect(dialog).to_contain_text("No one on this instance is called “nobody”")
    field(dialog, "Username or email").fill("frank@example.org")
    dialog.get_by_label("Role", exact=True).select_option("viewer")
    dialog.get_by_role("button", name="Share", exact=True).click()
    member = dialog.get_by_test_id("member")
    expect(member).to_contain_text("frank")
    expect(dialog).to_contain_text("Shared with frank as Viewer")
    assert NotebookMembership.objects.get().role == "viewer"
    shoot(page, "share-dialog-1366")
    page.set_viewport_size({"width": 390, "height": 844})
    no_overflow(page)
    shoot(page, "share-dialog-390")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.set_viewport_size({"width": 1366, "height": 900})

    # Frank, in a browser of his own.
    other = browser.new_context(base_url=asgi_server, viewport={"width": 1366, "height": 900})
    other.set_default_timeout(10_000)
    frank = other.new_page()
    frank_errors: list[str] = []
    frank.on("pageerror", lambda exc: frank_errors.append(str(exc)))
    login(frank, "frank", PASSWORD)
    shared = frank.locator("#shared-notebook-list")
    expect(shared).to_contain_text("Team handbook")
    expect(shared).to_contain_text("shared by erin")
    shoot(frank, "shared-with-me-1366")
    shared.get_by_role("link", name="Team handbook").click()
    expect(frank.get_by_test_id("role")).to_have_text("Viewer")
    expect(frank.locator("[data-dropzone]")).to_have_count(0)
    expect(frank.get_by_test_id("viewer-notice")).to_be_visible()
    composer = frank.get_by_label("Your question", exact=True)
    composer.fill(QUESTION)
    composer.press("Enter")
    answer = frank.locator("article.message-assistant").first
    expect(answer).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    expect(answer).to_contain_text("front desk")
    expect(answer.get_by_test_id("citation-chip").first).to_be_visible()
    expect(answer.get_by_test_id("save-to-note")).to_have_count(0)  # a viewer writes no notes
    shoot(frank, "viewer-workspace-1366")
    frank.set_viewport_size({"width": 390, "height": 844})
    no_overflow(frank)
    shoot(frank, "viewer-workspace-390")
    conversation = Conversation.objects.get(owner__username="frank")

    # Erin's conversations list has none of Frank's; his page is a 404 for her.
    page.goto(f"/notebooks/{handbook.pk}/chats/")
    expect(page.locator("main")).not_to_contain_text(QUESTION)
    opened = page.goto(f"/chats/{conversation.pk}/")
    assert opened is not None
    assert opened.status == 404

    # Erin revokes him: his next page load finds nothing.
    page.goto(f"/notebooks/{handbook.pk}/share/")
    page.get_by_test_id("member-remove").click()
    expect(page.get_by_test_id("no-members")).to_be_visible()
    gone = frank.goto(f"/notebooks/{handbook.pk}/")
    assert gone is not None
    assert gone.status == 404
    frank.goto("/")
    expect(frank.locator("main")).not_to_contain_text("Team handbook")
    other.close()
    assert frank_errors == []
    # The one 404 asked for above (Erin opening Frank's conversation), and nothing else.
    assert [e for e in errors if "/chats/" not in e and "404 (Not Found)" not in e] == []
