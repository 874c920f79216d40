"""Asking about a note's PDFs in a real browser, over the real WebSocket, under a strict CSP.

pytest-django's live server speaks WSGI only, so this test runs the real ASGI application
(`notebook.asgi.application`: Channels routing, origin and session checks) under daphne, in a
child process forked from the test process (Channels' own live-server way: it inherits the
test settings and database). A real qcluster ingests the PDF; the offline extractive answerer
writes the answer in the web process's runner thread.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

from chat.models import Message
from notes.models import Note
from notes.services import note_create, notebook_create
from tests.conftest import EVAL_PDFS
from tests.daphne_server import start_daphne
from tests.e2e.conftest import SCREENSHOTS
from tests.e2e.helpers import login
from tests.workers import Worker, run_worker

pytestmark = pytest.mark.e2e

PASSWORD = "Sturdy-Tulip-4821"
READY_TIMEOUT = 180  # seconds for the worker to take the PDF from upload to "Ready"
ANSWER_TIMEOUT = 60_000  # ms for the answer, the embedding model loading included
QUESTION = "Why does the url package refuse to break a line between two consecutive colons?"


# No inline script may run and the socket may only go to this origin: every page is served
# with this policy (a violation shows as a console error). Inline styles stay allowed for the
# indicator style htmx adds to the page.
STRICT_CSP = (
    b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    b"connect-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    b"form-action 'self'"
)


def _with_strict_csp(app: Any) -> Any:
    async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def send_with_csp(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"content-security-policy" for k, _ in headers):
                    headers.append((b"content-security-policy", STRICT_CSP))
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, send_with_csp if scope["type"] == "http" else send)

    return application


def _asgi_application() -> Any:  # module level: the child process calls it
    from channels.routing import get_default_application

    return _with_strict_csp(ASGIStaticFilesHandler(get_default_application()))


@pytest.fixture
def asgi_server(transactional_db) -> Iterator[str]:
    """daphne serving notebook.asgi.application on a free port of localhost."""
    server = start_daphne(_asgi_application)
    try:
        yield f"http://localhost:{server.port.value}"
    finally:
        server.terminate()
        server.join(10)


@pytest.fixture
def worker(transactional_db, tmp_path: Path) -> Iterator[Worker]:
    with run_worker(log=tmp_path / "qcluster.log") as running:
        yield running


@pytest.fixture
def chat_context(browser: Browser, asgi_server: str) -> Iterator[BrowserContext]:
    context = browser.new_context(
        base_url=asgi_server, viewport={"width": 1280, "height": 900}, locale="en-US"
    )
    context.set_default_timeout(10_000)
    yield context
    context.close()


@pytest.fixture
def chat_page(chat_context: BrowserContext) -> Page:
    return chat_context.new_page()


@pytest.fixture
def errors(chat_page: Page) -> list[str]:
    """JavaScript errors and failed requests of the page (the PDF tab is not watched)."""
    found: list[str] = []
    chat_page.on("pageerror", lambda exc: found.append(f"uncaught: {exc}"))
    chat_page.on(
        "console",
        lambda msg: found.append(f"console.error: {msg.text}") if msg.type == "error" else None,
    )
    chat_page.on(
        "response",
        lambda r: found.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
    )
    return found


def shoot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)


@pytest.fixture
def note(transactional_db) -> Note:
    erin = User.objects.create_user(username="erin", password=PASSWORD)
    notebook = notebook_create(owner=erin, title="TeX")
    return note_create(notebook=notebook, author=erin, title="URLs in LaTeX", body="")


def wait_until_ready(row: Locator, worker: Worker) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            expect(row).to_have_attribute("data-status", "ready", timeout=2_000)
            return
        except AssertionError:
            worker.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready; worker log:\n{worker.tail()}") from None


def record_statuses(page: Page) -> None:
    """Every text the answer's status line shows: the extractive answerer may search and
    answer faster than a one-off check could look."""
    page.evaluate(
        """() => {
            window.__statuses = [];
            const seen = () => document.querySelectorAll("[data-testid=tool-status]")
                .forEach((p) => {
                    const text = p.textContent.trim();
                    if (window.__statuses.at(-1) !== text) window.__statuses.push(text);
                });
            new MutationObserver(seen).observe(document.getElementById("message-list"),
                { childList: true, subtree: true, characterData: true });
        }"""
    )


def test_ask_about_a_notes_pdf_and_follow_a_citation(
    chat_page: Page, errors: list[str], note: Note, worker: Worker
) -> None:
    page = chat_page
    login(page, "erin", PASSWORD)
    page.goto(f"/notes/{note.pk}/")
    page.locator("input[data-file-input]").set_input_files(str(EVAL_PDFS / "url.pdf"))
    wait_until_ready(page.locator("#attachment-list > li[id^='attachment-']"), worker)

    page.get_by_role("button", name="Ask about this note’s PDFs", exact=True).click()
    expect(page).to_have_url(re.compile(r"/chats/\d+/$"))
    expect(page.get_by_text("Ask your first question.", exact=True)).to_be_visible()
    expect(page.locator("#chat")).to_have_attribute("data-socket", "open")
    record_statuses(page)
    page.evaluate("window.__sameDocument = true")

    question = page.get_by_label("Your question", exact=True)
    question.fill(QUESTION)
    question.press("Enter")

    # The question shows at once, then the tool activity, then the answer with its chips.
    expect(page.locator(".message-user")).to_have_text(QUESTION)
    expect(question).to_have_value("")
    answer = page.locator("article.message-assistant")
    expect(answer).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    statuses: list[str] = page.evaluate("window.__statuses")
    assert any(s.startswith("Searching documents for ‘") for s in statuses), statuses
    expect(page.get_by_text("Ask your first question.", exact=True)).to_be_hidden()
    expect(answer.get_by_test_id("answer")).to_contain_text("DECnet")
    expect(answer.get_by_test_id("extractive")).to_have_text("Extractive answer")
    expect(answer.get_by_test_id("confidence")).to_be_visible()
    chip = answer.get_by_test_id("citation-chip").first
    expect(chip).to_be_visible()
    shoot(page, "chat_answer")

    saved = Message.objects.get(role="assistant")
    first = saved.citations[0]
    chip.hover()  # the card: file, page and the quoted sentence
    card = answer.locator(".cite-card").first
    expect(card).to_be_visible()
    expect(card).to_contain_text(f"url.pdf, page {first['page']}")
    expect(card).to_contain_text(first["quote"][:40])
    shoot(page, "chat_citation_card")

    # A plain click opens the viewer panel (tests/e2e/test_viewer.py); Ctrl/Cmd-click keeps
    # the browser's new tab.
    with page.context.expect_page() as opened:
        chip.click(modifiers=["ControlOrMeta"])
    pdf = opened.value
    pdf.wait_for_url(re.compile(rf"/attachments/\d+/file/#page={first['page']}$"))
    pdf.close()

    # A reload shows the same answer, rendered from what was saved.
    before = answer.get_by_test_id("answer").inner_html()
    reloaded = page.reload()
    assert reloaded is not None
    assert "script-src 'self';" in reloaded.headers["content-security-policy"]
    expect(answer).to_have_attribute("data-status", "complete")
    assert answer.get_by_test_id("answer").inner_html() == before
    expect(page.locator(".message-user")).to_have_text(QUESTION)

    # The quote, marked in the page text.
    conversation_url = page.url
    answer.locator("[data-testid=source] a", has_text="page text").first.click()
    expect(page.locator("mark#quote")).to_be_visible()
    shoot(page, "chat_quote_in_page_text")

    # Without the socket, a follow-up chip still asks: a plain post, then the page polls.
    page.route_web_socket(re.compile(r"/ws/chat/"), lambda ws: ws.close(code=1008))
    page.goto(conversation_url)
    expect(page.locator("#chat")).to_have_attribute("data-socket", "closed")
    follow_up = page.get_by_test_id("follow-up").first
    asked = follow_up.inner_text()
    follow_up.click()
    expect(page).to_have_url(re.compile(r"/chats/\d+/#message-\d+$"))
    expect(page.locator(".message-user").nth(1)).to_have_text(asked)
    second = page.locator("article.message-assistant").nth(1)
    expect(second).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    expect(second.get_by_test_id("answer")).to_be_visible()

    # The note's conversations: this one, named after its first question.
    page.goto(f"/notes/{note.pk}/chats/")
    expect(page.locator(".conversation-row")).to_have_count(1)
    expect(page.locator(".conversation-title")).to_have_text(QUESTION[:80])
    expect(page.locator(".conversation-row")).to_contain_text("4 messages")
    shoot(page, "chat_conversation_list")
    assert errors == [], "\n".join(errors)
