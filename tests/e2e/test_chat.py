"""Asking about a note's PDFs in a real browser, over the real WebSocket, under a strict CSP.

pytest-django's live server speaks WSGI only, so this test runs the real ASGI application
(`notebook.asgi.application`: Channels routing, origin and session checks) under daphne, in a
child process forked from the test process (Channels' own live-server way: it inherits the
test settings and database). A real qcluster ingests the PDF; the offline extractive answerer
writes the answer in the web process's runner thread.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from chat.models import Message
from notes.models import Note
from tests.e2e.helpers import login
from tests.fixtures.chat_browser import (  # noqa: F401 - fixtures, shared
    ANSWER_TIMEOUT,
    PASSWORD,
    QUESTION,
    asgi_server,
    chat_context,
    chat_page,
    errors,
    note,
    shoot,
    wait_until_ready,
    worker,
)
from tests.fixtures.documents import SAMPLES
from tests.workers import Worker

pytestmark = pytest.mark.e2e


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
    page.locator("input[data-file-input]").set_input_files(str(SAMPLES / "manual.pdf"))
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
    expect(answer.get_by_test_id("answer")).to_contain_text("every link points to a page")
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
    expect(card).to_contain_text(f"manual.pdf, page {first['page']}")
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
