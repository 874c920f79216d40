"""Template junk a small model writes never reaches the page (issue 31): the system prompt
echoed HTML-escaped and re-wrapped, the answer inside our HTML-escaped <source> fence, closing
and full-width special tokens. Each comes from a profile of the fake chat server
(tests/fake_chat.py); the answers are shown at 1366 and 390 px, and again after a reload."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect

from chat import services as chat_services
from chat.models import Conversation
from notes.services import note_create, notebook_create
from tests.daphne_server import start_daphne
from tests.e2e.helpers import login
from tests.fake_chat import JUNK_BEHAVIOURS, FakeChat, fake_chat_server
from tests.fixtures.chat_browser import _asgi_application, shoot

pytestmark = pytest.mark.e2e

PASSWORD = "Sturdy-Tulip-4821"
ANSWER_TIMEOUT = 60_000  # ms, the embedding model loading for the search included
QUESTIONS = (  # one a junk profile, each answered by the note
    "Where does the url package break lines?",
    "Does the url package break lines between colons?",
    "After which characters does the url package break lines?",
)
BODY = "The url package breaks lines after slashes and dots. It never breaks between colons."
JUNK = ("&lt;", "&quot;", "&#x27;", "<source", "</source>", "|>", "｜", "<end_of_turn>",
        "ignore the rules", "Rules:", "untrusted material")  # fmt: skip


@pytest.fixture
def model(settings) -> Iterator[FakeChat]:
    """Set before the server process starts, so that it inherits the settings."""
    with fake_chat_server() as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        yield server


@pytest.fixture
def asgi_server(transactional_db, model: FakeChat) -> Iterator[str]:
    server = start_daphne(_asgi_application)
    try:
        yield f"http://localhost:{server.port.value}"
    finally:
        server.terminate()
        server.join(10)


@pytest.fixture
def conversation(transactional_db) -> Conversation:
    user = User.objects.create_user(username="gale", password=PASSWORD)
    notebook = notebook_create(owner=user, title="TeX")
    note_create(notebook=notebook, author=user, title="URLs", body=BODY)
    return chat_services.conversation_create(owner=user, notebook=notebook)


def test_template_junk_never_reaches_the_page(
    browser: Browser, asgi_server: str, model: FakeChat, conversation: Conversation
) -> None:
    context = browser.new_context(
        base_url=asgi_server, viewport={"width": 1366, "height": 900}, locale="en-US"
    )
    context.set_default_timeout(10_000)
    page: Page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    login(page, "gale", PASSWORD)
    page.goto(f"/chats/{conversation.pk}/")
    expect(page.locator("#chat")).to_have_attribute("data-socket", "open")
    answers = page.locator("article.message-assistant")
    for n, (junk, question) in enumerate(zip(JUNK_BEHAVIOURS, QUESTIONS, strict=True)):
        model.behaviours = {junk}
        asked = page.get_by_label("Your question", exact=True)
        asked.fill(question)
        asked.press("Enter")
        answer = answers.nth(n)
        expect(answer).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
        expect(answer.get_by_test_id("answer")).to_contain_text("The documents say:")
        expect(answer.get_by_test_id("source")).to_have_count(1)  # the quote was verified
    assert_clean(page)
    shoot(page, "template-junk-1366")
    page.set_viewport_size({"width": 390, "height": 844})
    shoot(page, "template-junk-390")

    page.reload()
    expect(answers).to_have_count(len(JUNK_BEHAVIOURS))
    assert_clean(page)
    assert errors == []
    context.close()


def assert_clean(page: Page) -> None:
    shown = page.locator("#message-list").inner_text()
    for junk in JUNK:
        assert junk not in shown, junk
    texts = page.get_by_test_id("answer").all_inner_texts()
    assert len(texts) == len(JUNK_BEHAVIOURS)
    for text in texts:
        assert text.startswith("The documents say: "), text
    expect(page.get_by_test_id("unsourced")).to_have_count(0)
