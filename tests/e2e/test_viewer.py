"""The citation viewer in a real browser: a citation opens a side panel that draws the cited
PDF page with PDF.js (vendored, static/vendor/pdfjs-dist) and highlights the quote on its text
layer, under the app's own strict Content-Security-Policy.

The app runs as in production: notebook.asgi.application under daphne, static files served by
WhiteNoise behind the CSP middleware (so PDF.js's worker gets the policy a deployment gives
it). Every CSP violation, in the page or in the PDF.js worker, lands in `js_errors`: the page's
`securitypolicyviolation` events through a binding, the worker's through the console
(static/js/viewer-worker.mjs listens for them inside the worker, where the browser fires
them, and logs them as errors). `test_a_csp_violation_reaches_js_errors` shows that a
violation in the page does arrive.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Locator, Page, expect

from chat import services as chat_services
from chat.models import Conversation, Message
from notes.models import Note
from tests.e2e.helpers import login
from tests.fixtures.chat_browser import ANSWER_TIMEOUT, QUESTION, wait_until_ready
from tests.fixtures.documents import SAMPLES, eval_pdf, upload
from tests.fixtures.viewer_browser import (  # noqa: F401 - fixtures, shared
    PASSWORD,
    asgi_server,
    assert_page_drawn,
    js_errors,
    note,
    owner,
    shoot,
    viewer_context,
    viewer_page,
    viewer_worker,
)
from tests.workers import Worker

pytestmark = pytest.mark.e2e


def reduced(text: str) -> str:
    """Letters and digits only, accents off, lower case: viewer.js's reduce()."""
    decomposed = unicodedata.normalize("NFKD", text).lower()
    return "".join(c for c in decomposed if unicodedata.category(c)[0] in "LN")


def highlighted(panel: Locator) -> list[str]:
    texts: list[str] = panel.locator(".textLayer .pdf-viewer-highlight").evaluate_all(
        "(spans) => spans.map((span) => span.textContent)"
    )
    return texts


def assert_quote_highlighted(panel: Locator, quote: str, *, exact: bool = True) -> None:
    expect(panel.get_by_test_id("viewer-status")).to_have_text(
        "The quote is highlighted."
        if exact
        else "The quote does not match this page exactly; the closest passage is highlighted."
    )
    marked = [reduced(text) for text in highlighted(panel)]
    assert marked, "nothing highlighted"
    wanted = reduced(quote)
    # Whole text-layer runs are marked: a run inside the quote, or the quote inside a run.
    assert any(m and (m in wanted or wanted in m) for m in marked), (marked, quote)
    # The first highlighted run is scrolled into the panel's view.
    inside = panel.evaluate(
        """(root) => {
            const box = root.querySelector(".pdf-viewer-scroll").getBoundingClientRect();
            const mark = root.querySelector(".pdf-viewer-highlight").getBoundingClientRect();
            return mark.top >= box.top && mark.bottom <= box.bottom;
        }"""
    )
    assert inside, "the highlight is out of view"


def focused_test_id(page: Page) -> str | None:
    focused: str | None = page.evaluate(
        "document.activeElement && document.activeElement.dataset.testid"
    )
    return focused


def test_a_citation_opens_its_page_with_the_quote_highlighted(
    viewer_page: Page, js_errors: list[str], note: Note, viewer_worker: Worker
) -> None:
    page = viewer_page
    login(page, "erin", PASSWORD)
    page.goto(f"/notes/{note.pk}/")
    page.locator("input[data-file-input]").set_input_files(str(SAMPLES / "manual.pdf"))
    wait_until_ready(page.locator("#attachment-list > li[id^='attachment-']"), viewer_worker)
    page.get_by_role("button", name="Ask about this note’s PDFs", exact=True).click()
    expect(page.locator("#chat")).to_have_attribute("data-socket", "open")
    question = page.get_by_label("Your question", exact=True)
    question.fill(QUESTION)
    question.press("Enter")
    answer = page.locator("article.message-assistant")
    expect(answer).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)

    saved = Message.objects.get(role="assistant")
    first = saved.citations[0]
    cited, quote = int(first["page"]), first["quote"]
    attachment = note.attachments.get()
    panel = page.get_by_test_id("pdf-viewer")
    expect(panel).to_be_hidden()

    # The answer came over the socket after the page loaded: the source list's link opens
    # the panel (event delegation), not a new tab.
    source = answer.get_by_test_id("source-link").first
    expect(source).to_have_attribute("data-viewer-page", str(cited))
    source.click()
    expect(panel).to_be_visible()
    assert len(page.context.pages) == 1
    expect(panel.get_by_role("heading")).to_contain_text("manual.pdf")
    expect(panel.get_by_test_id("viewer-quote")).to_have_text(quote)
    assert_page_drawn(panel, cited, 3)
    assert_quote_highlighted(panel, quote)
    expect(panel.get_by_test_id("viewer-open")).to_have_attribute(
        "href", f"/attachments/{attachment.pk}/file/#page={cited}"
    )
    expect(panel.get_by_test_id("viewer-text")).to_have_attribute(
        "href", re.compile(rf"^/attachments/{attachment.pk}/pages/\?page={cited}&quote=.+#quote$")
    )
    shoot(page, "viewer-1366")
    page.emulate_media(color_scheme="dark")
    shoot(page, "viewer-1366-dark")
    page.emulate_media(color_scheme="light")

    # Next and previous: another page has no highlight; back on the cited page it has again.
    other = cited + 1 if cited < 3 else cited - 1
    panel.get_by_test_id("viewer-next" if other > cited else "viewer-prev").click()
    assert_page_drawn(panel, other, 3)
    assert highlighted(panel) == []
    expect(panel.get_by_test_id("viewer-open")).to_have_attribute(
        "href", f"/attachments/{attachment.pk}/file/#page={other}"
    )
    panel.get_by_test_id("viewer-prev" if other > cited else "viewer-next").click()
    assert_page_drawn(panel, cited, 3)
    assert highlighted(panel)

    # Esc closes the panel and gives the focus back to the link that opened it.
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    assert focused_test_id(page) == "source-link"

    # The inline [n] chip opens it too; Close gives the focus back to the chip.
    chip = answer.get_by_test_id("citation-chip").first
    chip.click()
    expect(panel).to_be_visible()
    cited_by_chip = int(chip.get_attribute("data-viewer-page") or 0)
    assert_page_drawn(panel, cited_by_chip, 3)
    assert highlighted(panel)
    panel.get_by_test_id("viewer-close").click()
    expect(panel).to_be_hidden()
    assert focused_test_id(page) == "citation-chip"

    # Ctrl/Cmd-click keeps the browser's way: the PDF in a new tab, no panel.
    with page.context.expect_page() as opened:
        chip.click(modifiers=["ControlOrMeta"])
    tab = opened.value
    tab.wait_for_url(re.compile(rf"/attachments/{attachment.pk}/file/#page={cited_by_chip}$"))
    tab.close()
    expect(panel).to_be_hidden()

    # A phone: the panel covers the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    source.click()
    expect(panel).to_be_visible()
    assert_page_drawn(panel, cited, 3)
    assert_quote_highlighted(panel, quote)
    box = panel.bounding_box()
    assert box is not None
    assert (box["x"], box["width"], box["height"]) == (0, 390, 844), box
    canvas = panel.locator("canvas").bounding_box()
    assert canvas is not None
    assert 0 <= canvas["x"] < canvas["x"] + canvas["width"] <= 390, canvas
    shoot(page, "viewer-390")
    page.keyboard.press("Escape")
    expect(panel).to_be_hidden()
    assert js_errors == [], "\n".join(js_errors)


# A quote as the server extracted it and the page it is on: Chinese (embedded CID fonts,
# Identity-H) and German set by TeX (accents as separate marks, a hyphenated line break).
PAGES = {
    "lshort-zh-cn.pdf": (13, "TEX 是高德纳 (Donald E. Knuth) 为排版文字和数学公式而开发的软件"),
    "lilypond-essay.de.pdf": (
        3,
        "um wunderschöne Aufführungspartituren zu setzen, bevor es in der Lage war, Noten "
        "für einen Unversitätskurs",
    ),
}


@pytest.fixture
def conversation(note: Note) -> Conversation:
    return chat_services.conversation_create(owner=note.notebook.owner, notebook=note.notebook)


def add_citation_link(page: Page, attributes: dict[str, str]) -> Locator:
    """A citation link as chat/rendering.py writes it, added after the page loaded (as the
    socket adds answers)."""
    page.evaluate(
        """(attributes) => {
            const link = document.createElement("a");
            for (const [name, value] of Object.entries(attributes)) link.setAttribute(name, value);
            link.textContent = "cited";
            document.getElementById("message-list").append(link);
        }""",
        {"target": "_blank", "data-testid": "added-citation", **attributes},
    )
    return page.get_by_test_id("added-citation").last


# About real documents' fonts (TeX's embedded CID fonts and separate accents), which the samples
# do not have (they embed no font at all): the evaluation PDFs, so marked `eval`.
@pytest.mark.eval
@pytest.mark.parametrize("name", sorted(PAGES))
def test_chinese_and_german_pages_draw_and_their_quotes_are_found(
    viewer_page: Page, js_errors: list[str], note: Note, conversation: Conversation, name: str
) -> None:
    # No worker: the file is enough.
    attachment = upload(note.notebook.owner, note, name, eval_pdf(name))
    number, quote = PAGES[name]
    page = viewer_page
    login(page, "erin", PASSWORD)
    page.goto(f"/chats/{conversation.pk}/")
    file_url = f"/attachments/{attachment.pk}/file/"
    link = add_citation_link(
        page,
        {
            "href": f"{file_url}#page={number}",
            "data-viewer-file": file_url,
            "data-viewer-page": str(number),
            "data-viewer-quote": quote,
            "data-viewer-title": name,
            "data-viewer-text": f"/attachments/{attachment.pk}/pages/?page={number}",
        },
    )
    link.click()
    panel = page.get_by_test_id("pdf-viewer")
    assert_page_drawn(panel, number)
    assert_quote_highlighted(panel, quote)
    # The quote's words are drawn on the canvas: the page is not blank.
    inked = panel.locator("canvas").evaluate(
        """(canvas) => {
            const context = canvas.getContext("2d");
            const data = context.getImageData(0, 0, canvas.width, canvas.height).data;
            let dark = 0;
            for (let i = 0; i < data.length; i += 4) if (data[i] < 128) dark++;
            return dark;
        }"""
    )
    assert inked > 1000, inked
    shoot(page, f"viewer-{name.split('.')[0]}")

    # Part of the quote mangled: the longest stretch the page holds is marked instead.
    page.keyboard.press("Escape")
    mangled = quote[: len(quote) // 2] + " XQZJ WVKP " + quote[len(quote) // 2 :]
    link = add_citation_link(
        page,
        {
            "href": f"{file_url}#page={number}",
            "data-viewer-file": file_url,
            "data-viewer-page": str(number),
            "data-viewer-quote": mangled,
            "data-viewer-title": name,
        },
    )
    link.click()
    assert_page_drawn(panel, number)
    assert_quote_highlighted(panel, quote, exact=False)
    assert js_errors == [], "\n".join(js_errors)


def test_the_quote_matching_ignores_spacing_hyphens_case_and_accents(
    viewer_page: Page, js_errors: list[str], note: Note, conversation: Conversation
) -> None:
    page = viewer_page
    login(page, "erin", PASSWORD)
    page.goto(f"/chats/{conversation.pk}/")
    page.wait_for_function("() => !!window.notebookViewer")

    def locate(items: list[str], quote: str) -> Any:
        return page.evaluate("([i, q]) => window.notebookViewer.locate(i, q)", [items, quote])

    runs = ["Lange bevor LilyPond benutzt werden konnte, um wunder", "sch¨one Auff¨uhrungs",
            "partituren zu set-", "zen, bevor es in der Lage war."]  # fmt: skip
    assert locate(runs, "um  wunderschöne\nAufführungspartituren zu setzen") == {
        "exact": True,
        "runs": [0, 1, 2, 3],
    }
    assert locate(runs, "AUFFÜHRUNGSPARTITUREN") == {"exact": True, "runs": [1, 2]}
    assert locate(["The “ﬁrst” line", "of text"], 'the "first" line of') == {
        "exact": True,
        "runs": [0, 1],
    }
    # Not all there: the longest stretch that is, if it is long enough to mean something.
    assert locate(runs, "bevor es in der Lage war, Noten für einen Kurs zu setzen") == {
        "exact": False,
        "runs": [3],
    }
    assert locate(runs, "Something else entirely, not on this page") is None
    assert locate(runs, "") is None
    assert locate(["高德纳", "为排版文字和数学公式"], "高德纳为排版文字") == {
        "exact": True,
        "runs": [0, 1],
    }
    assert locate(["高德纳为排版文字和数学公式"], "数学公式而开发") == {"exact": False, "runs": [0]}
    assert js_errors == [], "\n".join(js_errors)


def test_a_csp_violation_reaches_js_errors(
    viewer_page: Page, js_errors: list[str], owner: User
) -> None:
    """The check the tests above rely on: an inline script and a style attribute set from
    markup are refused by the policy and reported."""
    page = viewer_page
    login(page, "erin", PASSWORD)
    assert js_errors == []
    page.evaluate(
        """() => {
            const script = document.createElement("script");
            script.textContent = "window.__ran = true";
            document.body.append(script);
            const box = document.createElement("div");
            box.innerHTML = '<p style="color: red">styled</p>';
            document.body.append(box);
        }"""
    )
    expect(page.locator("body")).to_contain_text("styled")
    assert page.evaluate("window.__ran === undefined")
    # The violation events are queued tasks, and the binding answers asynchronously.
    for _ in range(50):
        if len(js_errors) >= 2:
            break
        page.wait_for_timeout(100)
    assert any("script-src" in e for e in js_errors), js_errors
    assert any("style-src" in e for e in js_errors), js_errors
