"""The Sources pane of an empty notebook on a phone (390 px), in a real browser over the real
socket with a real worker (#35): a Word file, a slide deck, a spreadsheet, an OpenDocument
text, an e-book, a SubRip file, a recording (transcribed by a stand-in for an
OpenAI-compatible /v1/audio/transcriptions server), a YouTube link (a stand-in for YouTube's
pages) and a web page by address (a local site) are added; the count, the empty state and
the chat's first hint follow without a reload; the notes made for the files stay out of the
Notes pane; answers cite each by its slide, sheet, section or time, and a citation opens the
reader view at the quote. Then at 1366 px."""

from __future__ import annotations

import threading
import wave
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from notes.models import Notebook
from notes.services import notebook_create
from tests.e2e.helpers import login
from tests.fake_transcription import FakeTranscriber, fake_transcription_server
from tests.fake_youtube import FakeYouTube, Video, fake_youtube_server
from tests.fixtures.chat_browser import (  # noqa: F401 - fixtures, shared
    ANSWER_TIMEOUT,
    PASSWORD,
    asgi_server,
    chat_context,
    chat_page,
    errors,
    shoot,
    wait_until_ready,
)
from tests.workers import Worker, run_worker

pytestmark = pytest.mark.e2e

VIDEO = "dQw4w9WgXcQ"


def _docx(path: Path) -> Path:
    import docx

    document = docx.Document()
    document.add_heading("Hive care", 1)
    document.add_paragraph("Feed the colony sugar syrup when the autumn is dry.")
    document.add_heading("Wintering", 2)
    document.add_paragraph("Wrap the hive in straw so that the cluster keeps warm in January.")
    document.save(str(path))
    return path


def _pptx(path: Path) -> Path:
    from pptx import Presentation

    deck = Presentation()
    for title, body in [
        ("Hive inspection", "Check the brood pattern every week."),
        ("Swarming", "Colonies swarm when the hive gets crowded in May."),
    ]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    deck.save(str(path))
    return path


def _xlsx(path: Path) -> Path:
    import openpyxl

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Weights"
    sheet.append(["hive", "weight (kg)", "remark"])
    sheet.append(["Hive 3", 28, "a young swarm"])
    sheet.append(["Hive 7", 41, "the heaviest colony of the apiary"])
    workbook.save(str(path))
    return path


def _odt(path: Path) -> Path:
    from odf.opendocument import OpenDocumentText
    from odf.text import H, P

    document = OpenDocumentText()
    document.text.addElement(H(outlinelevel=1, text="Equipment"))
    document.text.addElement(P(text="Queen excluders keep the queen out of the honey supers."))
    document.save(str(path))
    return path


def _epub(path: Path) -> Path:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("bees-1")
    book.set_title("The honey year")
    book.set_language("en")
    chapter = epub.EpubHtml(title="Harvest", file_name="harvest.xhtml", lang="en")
    chapter.content = (
        "<html><body><h1>Harvest</h1><p>Honey is harvested in late summer, once the bees "
        "have capped the cells with wax.</p></body></html>"
    )
    book.add_item(chapter)
    book.toc = [chapter]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", chapter]
    epub.write_epub(str(path), book)
    return path


SRT = """1
00:02:05,000 --> 00:02:09,000
Smoke calms the guard bees before the hive is opened.
"""
PAGE = b"""<!doctype html><html><head><title>Apiary rules</title></head><body><article>
<h1>Apiary rules</h1><p>Visitors must wear a veil within ten metres of the hives.</p>
</article></body></html>"""


class _Site(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


def _wav(path: Path) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\x00\x00" * 4000)
    return path


@pytest.fixture
def site() -> Iterator[str]:
    """A web site on localhost (the worker is told to fetch from it: FETCH_ALLOWED_HOSTS)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def stand_ins(settings, site: str) -> Iterator[tuple[FakeTranscriber, FakeYouTube]]:
    """The transcription server and YouTube, set before the web server starts (it is forked
    with these settings); the worker gets them through its environment."""
    with fake_transcription_server() as transcriber, fake_youtube_server() as youtube:
        transcriber.segments = [
            {"start": 0.0, "end": 4.0, "text": "Bees dance to say where the flowers are."},
            {"start": 75.0, "end": 80.0, "text": "The waggle dance points towards the sun."},
        ]
        youtube.videos[VIDEO] = Video(
            title="How hives work",
            tracks={"en": ([(0.0, 4.0, "Hives hold up to sixty thousand bees."),
                            (65.0, 4.0, "Worker bees build the comb from wax.")], False)},
        )  # fmt: skip
        settings.TRANSCRIPTION_BASE_URL = transcriber.url
        settings.TRANSCRIPTION_MODEL = "whisper-1"
        settings.YOUTUBE_BASE_URL = youtube.url
        yield transcriber, youtube


@pytest.fixture
def notebook(transactional_db) -> Notebook:
    erin = get_user_model().objects.create_user(username="erin", password=PASSWORD)
    return notebook_create(owner=erin, title="Bees")


@pytest.fixture
def worker(stand_ins, site: str, transactional_db, tmp_path: Path) -> Iterator[Worker]:
    transcriber, youtube = stand_ins
    env = {"TRANSCRIPTION_BASE_URL": transcriber.url, "TRANSCRIPTION_MODEL": "whisper-1",
           "YOUTUBE_BASE_URL": youtube.url, "FETCH_ALLOWED_HOSTS": site}  # fmt: skip
    with run_worker(log=tmp_path / "qcluster.log", **env) as running:
        yield running


def no_overflow(page: Page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_sources_arrive_live_and_are_cited_on_a_phone(
    stand_ins, site: str, notebook: Notebook, chat_page: Page, errors: list[str],
    worker: Worker, tmp_path: Path,
) -> None:  # fmt: skip
    page = chat_page
    page.set_viewport_size({"width": 390, "height": 844})
    login(page, "erin", PASSWORD)
    page.goto(f"/notebooks/{notebook.pk}/")
    expect(page.locator("#chat-hint")).to_contain_text("First add a source")
    page.get_by_role("tab", name="Sources").click()
    count = page.get_by_test_id("source-count")
    expect(count).to_have_text("0")
    expect(page.locator("#no-sources")).to_contain_text("No sources yet.")

    (tmp_path / "smoke.srt").write_text(SRT)
    files = [_docx(tmp_path / "hives.docx"), _pptx(tmp_path / "bees.pptx"),
             _wav(tmp_path / "talk.wav"), _xlsx(tmp_path / "weights.xlsx"),
             _odt(tmp_path / "equipment.odt"), _epub(tmp_path / "harvest.epub"),
             tmp_path / "smoke.srt"]  # fmt: skip
    page.locator("[data-testid=add-sources] input[data-file-input]").set_input_files(
        [str(f) for f in files]
    )
    rows = page.locator("#source-list-new > li[id^='source-']")
    expect(rows).to_have_count(7)
    for url in (f"https://youtu.be/{VIDEO}", f"http://{site}/rules"):
        page.locator("#link-url").fill(url)
        page.get_by_role("button", name="Add link").click()
        expect(page.locator("#link-url")).to_have_value("")
    expect(rows).to_have_count(9)
    # No reload: the count, the tab's count and the empty state follow the arrivals.
    expect(count).to_have_text("9")
    expect(page.locator("#tab-source-count")).to_have_text("9")
    expect(page.locator("#no-sources")).not_to_contain_text("No sources yet.")
    for n in range(9):
        wait_until_ready(rows.nth(n), worker)
    expect(page.locator("#source-list-new")).to_contain_text("Apiary rules")
    expect(page.locator("#source-list-new")).to_contain_text("How hives work")
    no_overflow(page)
    shoot(page, "sources-live-390")

    # The notes made to hold the files are not notes of the Notes pane.
    page.get_by_role("tab", name="Notes").click()
    expect(page.locator("#tab-note-count")).to_have_text("0")
    expect(page.locator("#notes")).to_contain_text("No notes yet.")

    page.get_by_role("tab", name="Chat").click()
    expect(page.locator("#chat-hint")).not_to_contain_text("First add a source")
    composer = page.get_by_label("Your question", exact=True)
    composer.fill("When do colonies swarm?")
    composer.press("Enter")
    answer = page.locator("article.message-assistant").last
    expect(answer).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    expect(answer).to_contain_text("bees.pptx, Slide 2: Swarming")
    no_overflow(page)
    shoot(page, "sources-answer-slide-390")

    composer = page.get_by_label("Your question", exact=True)
    composer.fill("Where does the waggle dance point?")
    composer.press("Enter")
    second = page.locator("article.message-assistant").last
    expect(second).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    expect(second).to_contain_text("talk.wav, 1:15")
    chip = second.get_by_test_id("citation-chip").first
    href = chip.get_attribute("href")
    assert href is not None
    assert "/pages/?" in href

    composer = page.get_by_label("Your question", exact=True)
    composer.fill("What do worker bees build the comb from?")
    composer.press("Enter")
    third = page.locator("article.message-assistant").last
    expect(third).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    expect(third).to_contain_text("How hives work, 1:05")
    shoot(page, "sources-answer-time-390")

    # A spreadsheet, an OpenDocument text, an e-book, a SubRip file and a web page by address,
    # each cited by its place.
    for question, where in [
        ("Which hive is the heaviest colony of the apiary?", "weights.xlsx, Weights"),
        ("What keeps the queen out of the honey supers?", "equipment.odt, Equipment"),
        ("When is honey harvested?", "harvest.epub, Harvest"),
        ("What calms the guard bees before the hive is opened?", "smoke.srt, 2:05"),
        ("Who must wear a veil near the hives?", "Apiary rules"),
    ]:
        composer = page.get_by_label("Your question", exact=True)
        composer.fill(question)
        composer.press("Enter")
        cited = page.locator("article.message-assistant").last
        expect(cited).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
        expect(cited.get_by_test_id("citation-chip").first).to_be_visible()
        expect(cited).to_contain_text(where)
    no_overflow(page)

    page.goto(href)
    mark = page.locator("pre.extracted mark").first
    expect(mark).to_be_visible()
    expect(mark).to_contain_text("waggle dance")
    no_overflow(page)
    shoot(page, "sources-reader-390")

    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto(f"/notebooks/{notebook.pk}/")
    expect(page.get_by_test_id("source-count")).to_have_text("9")
    shoot(page, "sources-1366")
    assert errors == []
