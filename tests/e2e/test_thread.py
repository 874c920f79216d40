"""A conversation that keeps its thread, in a real browser over the real socket: offline, a
follow-up is searched as asked with the earlier questions as context (the page says so, and
shows no internal query) and cites the right file, Compact says what it did, and offline
nothing said in a question becomes a memory."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from chat.models import Memory, Message
from notes.models import Note
from tests.e2e.conftest import SCREENSHOTS
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
    worker,
)
from tests.fixtures.documents import SAMPLES
from tests.workers import Worker

pytestmark = pytest.mark.e2e  # runs last, with the browser (Playwright's loop stays behind)

# About manual.pdf (tests/samples/): its page 3 answers both.
FIRST = (
    "Remember that I prefer short answers. With Lantern, how do I upload the finished site to "
    "my web server?"
)
FOLLOW_UP = "Will that also send the files that did not change?"


def ask(page: Page, text: str, n: int) -> None:
    question = page.get_by_label("Your question", exact=True)
    question.fill(text)
    question.press("Enter")
    answer = page.locator("article.message-assistant").nth(n)
    expect(answer).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)


def test_a_follow_up_keeps_the_thread_compact_and_memory(
    chat_page: Page, errors: list[str], note: Note, worker: Worker
) -> None:
    page = chat_page
    login(page, "erin", PASSWORD)
    page.goto(f"/notes/{note.pk}/")
    page.locator("input[data-file-input]").set_input_files(str(SAMPLES / "manual.pdf"))
    wait_until_ready(page.locator("#attachment-list > li[id^='attachment-']"), worker)
    page.get_by_role("button", name="Ask about this note’s PDFs", exact=True).click()
    expect(page.locator("#chat")).to_have_attribute("data-socket", "open")

    expect(page.get_by_test_id("mode")).to_have_value("exploring")
    ask(page, FIRST, 0)
    first = page.locator("article.message-assistant").nth(0)
    expect(first.get_by_test_id("read-in-context")).to_have_count(0)  # nothing to follow up

    ask(page, FOLLOW_UP, 1)
    second = page.locator("article.message-assistant").nth(1)
    expect(second.get_by_test_id("read-in-context")).to_contain_text("earlier questions")
    expect(second.get_by_test_id("searched-for")).to_have_count(0)  # nothing was rewritten
    chip = second.get_by_test_id("citation-chip").first
    expect(chip).to_be_visible()
    chip.hover()
    expect(second.locator(".cite-card").first).to_contain_text("manual.pdf, page")
    shoot(page, "thread_follow_up")
    asked = Message.objects.get(content=FOLLOW_UP)
    assert asked.is_follow_up
    assert asked.search_query == FOLLOW_UP
    assert asked.anchors == [note.attachments.get().pk]

    for width, height in ((1366, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        shoot(page, f"thread_follow_up_{width}")
        # The conversation itself never runs wider than the screen (the site header at 390 px
        # is the workspace issue's).
        widest = page.evaluate(
            "Math.max(...['#message-list', '#ask-form'].map("
            "(s) => document.querySelector(s).getBoundingClientRect().right))"
        )
        assert widest <= width, f"{widest} px at {width} px"
        print(f"page width at {width}: {page.evaluate('document.documentElement.scrollWidth')}")

    # On a phone the page itself scrolls under the sticky composer: a question just asked
    # goes to the top of the screen, and the page follows its answer as it streams in.
    ask(page, "What does lantern build check before it writes anything?", 2)
    in_view = """() => {
        const asked = document.querySelectorAll(".message-user")[2].getBoundingClientRect();
        const answer = document.querySelectorAll("article.message-assistant")[2]
            .getBoundingClientRect();
        const form = document.getElementById("ask-form").getBoundingClientRect();
        return asked.top >= -1 && asked.top < 120 && answer.top < form.top - 200;
    }"""
    page.wait_for_function(in_view, timeout=5_000)
    page.screenshot(path=SCREENSHOTS / "thread_third_question_390.png")  # what the eye sees
    # Opened again, the conversation shows the end of its last answer above the composer.
    page.goto(page.url)
    page.wait_for_function(
        """() => {
            const answers = document.querySelectorAll("article.message-assistant");
            const last = answers[answers.length - 1].getBoundingClientRect();
            return last.bottom <= document.getElementById("ask-form").getBoundingClientRect().top;
        }""",
        timeout=5_000,
    )

    # Four messages: nothing old enough to summarise yet, and the page says so.
    page.get_by_role("button", name=re.compile("Compact")).click()
    expect(page.locator("body")).to_contain_text(re.compile(r"[Nn]othing to compact"))

    # Offline, "Remember that I prefer short answers" in the first question is not extracted:
    # no rules read questions (a chat model's structured call does).
    assert not Memory.objects.filter(notebook=note.notebook).exists()
    page.goto(f"/notebooks/{note.notebook_id}/")
    panel = page.locator("#memories")
    expect(panel).to_contain_text("Nothing remembered yet")
    for width, height in ((1366, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        shoot(page, f"thread_memory_panel_{width}")
        assert panel.evaluate("(el) => el.getBoundingClientRect().right") <= width
    assert errors == [], "\n".join(errors)
