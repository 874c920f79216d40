"""Studio in a real browser, with a real django-q2 worker writing the outputs: from the
workspace's Studio pane, make a briefing, open it, follow a citation into the viewer (the
quote highlighted), regenerate, rename and delete it; walk the mind map with the keyboard;
answer the quiz; turn a flashcard; all at 1366 px, then the pane as a tab and an output page
at 390 px without overflow; play the audio overview. Every other kind, and the outputs a chat
model writes: test_studio_kinds.py. Screenshots in test-artifacts/screenshots/studio-*.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from studio.models import StudioOutput
from tests.e2e.helpers import login
from tests.fixtures.chat_browser import (  # noqa: F401 - fixtures, shared
    PASSWORD,
    asgi_server,
    chat_context,
    chat_page,
    errors,
    shoot,
    worker,
)
from tests.fixtures.studio_browser import (  # noqa: F401 - the notebook fixture, shared
    WRITTEN,
    make,
    no_overflow,
    notebook,
    until,
)
from tests.workers import Worker

pytestmark = pytest.mark.e2e


def test_make_open_cite_regenerate_rename_and_delete(
    chat_page: Page, errors: list[str], notebook, worker: Worker
) -> None:
    page = chat_page
    page.set_viewport_size({"width": 1366, "height": 900})
    login(page, "erin", PASSWORD)
    page.goto(f"/notebooks/{notebook.pk}/")
    pane = page.locator("#pane-studio")
    expect(pane.get_by_test_id("studio-empty")).to_be_visible()
    make(page, "briefing", worker)
    shoot(page, "studio-1366-workspace")

    pane.locator("[data-testid=studio-row] a.studio-title").first.click()
    expect(page.get_by_test_id("studio-title")).to_contain_text("Briefing")
    expect(page.get_by_test_id("studio-provenance")).to_be_visible()
    assert page.locator(".studio-section h2").first.inner_text() == "Summary"
    chip = page.get_by_test_id("citation-chip").first
    chip.click()
    panel = page.get_by_test_id("pdf-viewer")
    expect(panel).to_be_visible()
    expect(panel.get_by_test_id("viewer-quote")).not_to_be_empty()
    expect(panel.locator(".textLayer .pdf-viewer-highlight").first).to_be_visible(timeout=20_000)
    shoot(page, "studio-1366-briefing-viewer")
    panel.get_by_test_id("viewer-close").click()

    page.get_by_test_id("studio-regenerate").click()
    expect(page.get_by_test_id("studio-status")).to_have_attribute(
        "data-status", "ready", timeout=WRITTEN
    )
    expect(page.locator(".studio-section").first).to_be_visible()
    page.locator(".studio-rename summary").click()
    page.locator("#studio-new-title").fill("Bees and boats, in brief")
    page.get_by_test_id("studio-rename-save").click()
    expect(page.get_by_test_id("studio-title")).to_have_text("Bees and boats, in brief")

    page.get_by_test_id("studio-delete").click()
    page.get_by_test_id("studio-delete-confirm").click()
    expect(page.locator("#pane-studio").get_by_test_id("studio-empty")).to_be_visible()
    assert not StudioOutput.objects.exists()
    assert errors == []


def test_mind_map_quiz_and_flashcards_by_keyboard_and_touch_sizes(
    chat_page: Page, errors: list[str], notebook, worker: Worker
) -> None:
    page = chat_page
    page.set_viewport_size({"width": 1366, "height": 900})
    login(page, "erin", PASSWORD)
    page.goto(f"/notebooks/{notebook.pk}/")
    for kind in ("mind_map", "quiz", "flashcards"):
        make(page, kind, worker)
    rows = page.locator("#pane-studio [data-testid=studio-row]")

    rows.and_(page.locator('[data-kind="mind_map"]')).locator("a.studio-title").click()
    tree = page.locator("[data-map-tree]")
    first = tree.locator("[role=treeitem]").first
    expect(first).to_have_attribute("aria-expanded", "true")
    first.focus()
    page.keyboard.press("ArrowDown")
    focused = page.evaluate("document.activeElement.getAttribute('aria-level')")
    assert focused == "2"
    second = tree.locator("[role=treeitem][aria-level='2']").first  # a file, open
    expect(second).to_have_attribute("aria-expanded", "true")
    page.keyboard.press("ArrowLeft")  # closes it
    expect(second).to_have_attribute("aria-expanded", "false")
    page.keyboard.press("ArrowRight")  # opens it again
    expect(second).to_have_attribute("aria-expanded", "true")
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")  # to the root
    page.keyboard.press("ArrowLeft")  # closes it
    expect(first).to_have_attribute("aria-expanded", "false")
    page.get_by_role("button", name="Expand all").click()
    expect(first).to_have_attribute("aria-expanded", "true")
    expect(tree.get_by_test_id("citation-chip").first).to_be_visible()
    shoot(page, "studio-1366-mind-map")
    page.go_back()

    rows.and_(page.locator('[data-kind="quiz"]')).locator("a.studio-title").click()
    questions = page.get_by_test_id("quiz-question")
    expect(questions.first).to_be_visible()  # the page has loaded (count() does not wait)
    count = questions.count()
    assert count >= 1
    questions.first.locator("input[type=radio]").first.check()
    page.get_by_role("button", name="Check my answers").click()
    expect(page.locator("[data-quiz-score]")).to_contain_text(f"of {count} right")
    expect(questions.first.locator(".quiz-option.is-answer")).to_have_count(1)
    shoot(page, "studio-1366-quiz")
    page.go_back()

    rows.and_(page.locator('[data-kind="flashcards"]')).locator("a.studio-title").click()
    card = page.get_by_test_id("flashcard").first
    card.locator("summary").click()
    expect(card.locator(".card-back")).to_be_visible()
    expect(card.get_by_test_id("citation-chip").first).to_be_visible()
    shoot(page, "studio-1366-flashcards")

    # A phone: the Studio pane is a tab; an output page fits the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/notebooks/{notebook.pk}/")
    page.get_by_role("tab", name="Studio").click()
    expect(page.locator("#pane-studio")).to_be_visible()
    expect(page.locator("#pane-studio").get_by_test_id("studio-row")).to_have_count(3)
    no_overflow(page)
    shoot(page, "studio-390-pane")
    page.locator("#pane-studio [data-testid=studio-row] a.studio-title").first.click()
    expect(page.get_by_test_id("studio-output")).to_be_visible()
    no_overflow(page)
    shoot(page, "studio-390-output")
    assert errors == []


def test_audio_overview_plays_with_its_transcript(
    chat_page: Page, errors: list[str], notebook, worker: Worker
) -> None:
    """Made offline by the worker (Piper, in slices that are each a job), the overview plays in
    the page: its length is the file's, a line's time plays from there and marks the line; the
    MP3 it downloads decodes to that length; at 390 px nothing overflows."""
    import io

    import soundfile

    page = chat_page
    page.set_viewport_size({"width": 1366, "height": 900})
    login(page, "erin", PASSWORD)
    page.goto(f"/notebooks/{notebook.pk}/")
    pane = page.locator("#pane-studio")
    pane.get_by_test_id("studio-audio").click()
    row = pane.locator('[data-testid=studio-row][data-kind="audio"]').first
    try:
        expect(row).to_have_attribute("data-status", "ready", timeout=3 * WRITTEN)
    except AssertionError:
        worker.check_alive()
        raise AssertionError(f"not spoken; worker log:\n{worker.tail()}") from None
    row.locator("a.studio-title").click()
    player = page.get_by_test_id("audio-player")
    expect(player).to_be_visible()
    output = StudioOutput.objects.get(kind="audio")
    seconds = output.content["audio"]["seconds"]
    until(page, "document.querySelector('[data-audio-player]').readyState >= 1")
    assert page.evaluate("document.querySelector('[data-audio-player]').duration") == (
        pytest.approx(seconds, abs=0.3)
    )
    lines = page.get_by_test_id("transcript-line")
    assert lines.count() == len(output.content["sections"][0]["items"])
    second = lines.nth(2)
    start = float(second.get_attribute("data-start") or 0)
    second.locator("[data-seek]").click()
    until(page, f"document.querySelector('[data-audio-player]').currentTime >= {start}")
    expect(second).to_have_attribute("aria-current", "true")
    page.evaluate("document.querySelector('[data-audio-player]').pause()")
    expect(page.get_by_test_id("audio-length")).to_contain_text("Piper")
    shoot(page, "studio-1366-audio")
    # A quote's citation opens the viewer at its page.
    page.locator(".transcript-line [data-testid=citation-chip]").first.click()
    expect(page.get_by_test_id("pdf-viewer")).to_be_visible()
    page.keyboard.press("Escape")

    saved = page.request.get(page.get_by_test_id("studio-mp3").get_attribute("href") or "")
    assert saved.ok
    assert saved.headers["content-type"] == "audio/mpeg"
    info = soundfile.info(io.BytesIO(saved.body()))
    assert info.duration == pytest.approx(seconds, abs=0.2)

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.get_by_test_id("audio-player")).to_be_visible()
    no_overflow(page)
    shoot(page, "studio-390-audio")
    assert not errors, errors
