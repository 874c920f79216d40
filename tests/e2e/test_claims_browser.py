"""Claims checked one by one, in a real browser: a model that copies one true sentence of its
source and adds invented claims citing it (tests/fake_chat.py, the embellish profile) gets a
chip for the true sentence only, each invented one marked "not found in the sources", the
warning above the text and no "High confidence"; an answer with nothing backed is not offered
for a note. At 1366 and 390 px, under the real ASGI application."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from playwright.sync_api import Browser, Page, expect

from chat import services as chat_services
from chat.models import Conversation
from notes.services import note_create, notebook_create
from tests.daphne_server import start_daphne
from tests.e2e.conftest import SCREENSHOTS
from tests.e2e.helpers import login
from tests.fake_chat import EMBELLISH, Answer, FakeChat, Metadata, fake_chat_server

pytestmark = pytest.mark.e2e

PASSWORD = "Sturdy-Tulip-4821"
ANSWER_TIMEOUT = 60_000  # ms, the embedding model loading for the search included
BODY = (
    "The archive tool packs every file of a folder into one compressed bundle. "
    "It keeps the original files untouched and writes the bundle next to them. "
    "Bundles can be unpacked again with the same tool on any machine."
)


def _asgi_application() -> Any:  # module level: the server process calls it
    from channels.routing import get_default_application

    return ASGIStaticFilesHandler(get_default_application())


@pytest.fixture
def model(settings) -> Iterator[FakeChat]:
    with fake_chat_server(EMBELLISH) as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        yield server


@pytest.fixture
def site(transactional_db, model: FakeChat) -> Iterator[str]:
    server = start_daphne(_asgi_application)
    try:
        yield f"http://localhost:{server.port.value}"
    finally:
        server.terminate()
        server.join(10)


@pytest.fixture
def conversation(transactional_db) -> Conversation:
    user = User.objects.create_user(username="casey", password=PASSWORD)
    notebook = notebook_create(owner=user, title="Tools")
    note_create(notebook=notebook, author=user, title="The archive tool", body=BODY)
    return chat_services.conversation_create(owner=user, notebook=notebook)


def ask(page: Page, question: str, nth: int) -> Any:
    asked = page.get_by_label("Your question", exact=True)
    asked.fill(question)
    asked.press("Enter")
    answer = page.locator("article.message-assistant").nth(nth)
    expect(answer).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    return answer


def test_invented_claims_are_marked_and_a_wholly_unbacked_answer_warns_first(
    browser: Browser, site: str, model: FakeChat, conversation: Conversation
) -> None:
    context = browser.new_context(
        base_url=site, viewport={"width": 1366, "height": 900}, locale="en-US"
    )
    context.set_default_timeout(10_000)
    page = context.new_page()
    login(page, "casey", PASSWORD)
    page.goto(f"/chats/{conversation.pk}/")
    expect(page.locator("#chat")).to_have_attribute("data-socket", "open")

    answer = ask(page, "What does the archive tool do with the files of a folder?", 0)
    expect(answer.get_by_test_id("citation-chip")).to_have_count(1)
    flags = answer.get_by_test_id("claim-unbacked")
    expect(flags).to_have_count(2)
    expect(flags.first).to_have_text("not found in the sources")
    expect(answer.locator(".claim-unbacked").first).to_contain_text("Napoleon")
    notice = answer.get_by_test_id("partly-unbacked")
    expect(notice).to_contain_text("2 sentences are not backed by your sources")
    expect(answer.get_by_test_id("confidence")).not_to_have_text("High confidence")
    expect(answer.get_by_test_id("save-to-note")).to_be_visible()  # it keeps the marks

    # Nothing backed: the warning comes before the text, and nothing is offered for a note.
    model.script = [
        Answer("The archive tool was written by Napoleon Bonaparte on Elba in 1815 [1]."),
        Metadata({"confidence": "high", "follow_ups": [], "answerable": True, "citations": []}),
    ]
    second = ask(page, "Who wrote the archive tool that packs the files of a folder?", 1)
    warning = second.get_by_test_id("unsourced")
    expect(warning).to_be_visible()
    expect(second.get_by_test_id("claim-unbacked")).to_have_count(1)
    expect(second.get_by_test_id("save-to-note")).to_have_count(0)
    expect(second.get_by_test_id("confidence")).to_have_count(0)

    for width in (1366, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.reload()
        for item, note in ((answer, notice), (second, warning)):
            text = item.get_by_test_id("answer").bounding_box()
            box = note.bounding_box()
            assert box is not None
            assert text is not None
            assert box["y"] + box["height"] <= text["y"]  # above the text
            assert box["x"] + box["width"] <= width  # within the screen
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        answer.scroll_into_view_if_needed()
        page.screenshot(path=SCREENSHOTS / f"claims-{width}.png", full_page=True)
    context.close()
