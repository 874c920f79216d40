"""A source that is not a PDF, in a real browser over the real socket and a real worker (#35):
an HTML page dropped on the workspace's sources is read by section, an answer cites it by its
section, and the citation opens the reader view at that section with the quote marked; a
transcript is cited by its time. At 1366 and 390 px, under the app's own CSP."""

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
from tests.workers import Worker, run_worker

pytestmark = pytest.mark.e2e

PAGE = """<!doctype html><html><head><title>Heron field guide</title></head><body>
<nav><a href="/">Home</a></nav><article><h1>Heron field guide</h1>
<p>Herons are long-legged wading birds found near fresh water across the world.</p>
<h2>Nesting</h2><p>The grey heron nests in colonies called heronries, high in tall trees beside
lakes. Each pair raises three to five chicks every spring.</p>
<h2>Feeding</h2><p>Herons stand motionless in shallow water and strike fish with their bills.</p>
</article></body></html>"""
VTT = """WEBVTT

00:00:02.000 --> 00:00:06.000
Welcome to the course on beekeeping for beginners.

00:01:12.000 --> 00:01:18.000
Queens are marked with a dot of paint so that they are easy to find.
"""


@pytest.fixture
def worker(transactional_db, tmp_path: Path) -> Iterator[Worker]:
    with run_worker(log=tmp_path / "qcluster.log") as running:
        yield running


def no_overflow(page: Page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_an_html_page_and_a_transcript_are_cited_by_section_and_time(
    chat_page: Page, errors: list[str], note: Note, worker: Worker, tmp_path: Path
) -> None:
    page = chat_page
    page.set_viewport_size({"width": 1366, "height": 900})
    (tmp_path / "herons.html").write_text(PAGE)
    (tmp_path / "course.vtt").write_text(VTT)
    login(page, "erin", PASSWORD)
    page.goto(f"/notebooks/{note.notebook_id}/")
    page.locator("[data-testid=add-sources] input[data-file-input]").set_input_files(
        [str(tmp_path / "herons.html"), str(tmp_path / "course.vtt")]
    )
    rows = page.locator("#source-list-new > li[id^='source-']")
    expect(rows).to_have_count(2)
    wait_until_ready(rows.nth(0), worker)
    wait_until_ready(rows.nth(1), worker)
    shoot(page, "other-sources-1366")

    composer = page.get_by_label("Your question", exact=True)
    composer.fill("Where do grey herons nest?")
    composer.press("Enter")
    answer = page.locator("article.message-assistant").last
    expect(answer).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    expect(answer).to_contain_text("herons.html, Nesting")
    chip = answer.get_by_test_id("citation-chip").first
    href = chip.get_attribute("href")
    assert href is not None
    assert "/pages/?" in href  # the reader view, not a PDF viewer
    assert chip.get_attribute("data-viewer-file") is None

    composer = page.get_by_label("Your question", exact=True)
    composer.fill("How are queens marked?")
    composer.press("Enter")
    second = page.locator("article.message-assistant").last
    expect(second).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    expect(second).to_contain_text("course.vtt, 1:12")
    shoot(page, "other-sources-answer-1366")

    page.goto(href)
    expect(page.get_by_role("heading", name="Nesting", exact=True)).to_be_visible()
    mark = page.locator("pre.extracted mark").first
    expect(mark).to_be_visible()
    expect(mark).to_contain_text("heronries")
    expect(page.locator("#quote-status")).to_have_text("The cited quote is marked below.")
    shoot(page, "reader-1366")
    page.set_viewport_size({"width": 390, "height": 844})
    no_overflow(page)
    shoot(page, "reader-390")
    page.go_back()
    no_overflow(page)

    # A file over the size limit is refused in the page, before any byte is sent.
    big = tmp_path / "huge.html"
    with big.open("wb") as out:
        out.truncate(51 * 1024 * 1024)  # sparse: MAX_UPLOAD_MB (50) + 1
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.method == "POST" else None)
    page.locator("[data-testid=add-sources] input[data-file-input]").set_input_files(str(big))
    refused = page.get_by_test_id("too-large")
    expect(refused).to_contain_text("“huge.html” is 51.0 MB; the limit is 50 MB.")
    assert not [url for url in sent if "/sources/" in url]
    assert errors == []
