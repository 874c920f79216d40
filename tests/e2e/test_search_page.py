"""The search page as a person sees it, at 1366 px and at 390 px (a phone): each result shows its
file or note, page, section and a snippet with the words marked; scores and timings wait behind
a collapsed "Details"; a note's snippet reads as text, not Markdown; nothing scrolls sideways."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from attachments.services import attachment_ingest
from core import embeddings
from notes.services import note_create, notebook_create
from tests.e2e.helpers import login
from tests.fixtures.documents import upload

pytestmark = pytest.mark.e2e

PASSWORD = "Sturdy-Tulip-4821"
QUERY = "lantern publish public folder"  # in manual.pdf (tests/samples/) and the note


@pytest.fixture
def library() -> None:
    sam = User.objects.create_user(username="sam", password=PASSWORD)
    notebook = notebook_create(owner=sam, title="Command-line tools with a rather long title")
    note = note_create(
        notebook=notebook, author=sam, title="Publishing with Lantern",
        body="## Publishing\n\nThe **lantern** tool publishes the public folder over *SFTP* "
        "with the `publish` command; see [the manual](https://example.org/lantern).\n\n- one"
        "\n- two",
    )  # fmt: skip
    attachment = upload(sam, note, "manual.pdf")
    attachment_ingest(attachment_id=attachment.pk)


WIDER = """(selector) => [...document.querySelectorAll(selector)]
  .filter(el => el.checkVisibility())
  .map(el => [el, Math.round(el.getBoundingClientRect().right)])
  .filter(([el, right]) => right > window.innerWidth)
  .map(([el, right]) => `${el.tagName.toLowerCase()}.${el.className} ${right}`)"""


def _wider_than_screen(page: Page, selector: str = "body *") -> list[str]:
    """The visible elements of the page, header included, that reach past the right edge of
    the screen (what would make it scroll sideways)."""
    return list(page.evaluate(WIDER, selector))


def test_search_results_read_well_on_desktop_and_phone(
    page: Page, js_errors: list[str], screenshot, library
) -> None:
    login(page, "sam", PASSWORD)
    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto(f"/search/?q={QUERY.replace(' ', '+')}")  # a link: the defaults apply
    results = page.locator("ol.search-results > li")
    expect(results.first).to_be_visible()
    expect(page.get_by_label("Include notes")).to_be_checked()

    pdf = results.filter(has=page.locator(".badge", has_text="PDF")).first
    expect(pdf.locator(".hit-title")).to_have_text("manual.pdf")
    expect(pdf.locator(".hit-page")).to_contain_text("page")
    expect(pdf.locator(".snippet mark").first).to_be_visible()
    note = results.filter(has=page.locator(".note-badge")).first
    expect(note.locator(".hit-title")).to_have_text("Publishing with Lantern")
    snippet = note.locator(".snippet").inner_text()
    assert not any(markup in snippet for markup in ("**", "##", "](", "`")), snippet
    assert "lantern tool publishes the public folder" in snippet

    # Scores and timings are behind Details, collapsed, for each result and for the search.
    for details in [page.locator("#search-details"), *page.locator(".hit-details").all()]:
        assert details.evaluate("el => el.open") is False
    expect(page.get_by_text("Words (BM25)").first).to_be_hidden()
    expect(page.locator("#search-details dd").first).to_be_hidden()
    screenshot("search-1366")

    pdf.locator(".hit-details summary").click()
    expect(pdf.get_by_text("Words (BM25)")).to_be_visible()
    pdf.locator(".hit-details summary").click()

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(results.first).to_be_visible()
    assert _wider_than_screen(page) == []
    screenshot("search-390")

    page.get_by_text("Filters").click()  # the filter row wraps within the phone's width
    page.locator("#search-details summary").click()
    assert _wider_than_screen(page) == []
    screenshot("search-390-open")

    page.goto("/search/?q=zzyzxnothing&mode=lexical")
    expect(page.get_by_text("Nothing matched.")).to_be_visible()
    assert _wider_than_screen(page) == []
    screenshot("search-390-empty")
    assert js_errors == []


def test_results_found_while_the_model_warms_up_are_joined_by_meaning_based_ones(
    page: Page,
    js_errors: list[str],
    screenshot,
    library,
    held_load,
) -> None:
    """The notice says the results match words only; once the model is in, the results region
    (which asks again by itself) brings the meaning-based ones without a click."""
    login(page, "sam", PASSWORD)
    page.set_viewport_size({"width": 1366, "height": 900})
    embeddings.warm_up_in_background()
    assert held_load.started.wait(60)
    page.goto(f"/search/?q={QUERY.replace(' ', '+')}")
    notice = page.locator("#search-warming")
    expect(notice).to_contain_text("Warming up the search model")
    expect(page.locator("ol.search-results > li").first).to_be_visible()
    screenshot("search-warming-1366")

    held_load.release()
    expect(notice).to_be_hidden(timeout=120_000)  # the region asked again and got vectors
    page.locator("#search-details summary").click()
    expect(page.locator("#search-details")).to_contain_text("embed_query")
    assert js_errors == []
