"""Studio in a real browser, every kind besides the briefing (test_studio.py): made from the
pane by a real worker, a citation followed into the viewer, regenerated and deleted, at 1366
and 390 px; and with a chat model (a local fake server), the briefing it writes and the mind
map's themes it names."""

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
    DONE,
    WRITTEN,
    cite,
    make,
    no_overflow,
    notebook,
)
from tests.workers import Worker

pytestmark = pytest.mark.e2e


def test_every_kind_is_made_cited_regenerated_and_deleted_at_both_widths(
    chat_page: Page, errors: list[str], notebook, worker: Worker
) -> None:
    """Each kind besides the briefing (test_studio.py): made from the pane and opened at 1366 px, a
    citation followed into the viewer, regenerated; then at 390 px a citation followed again
    without overflow, and the output deleted."""
    page = chat_page
    login(page, "erin", PASSWORD)
    for kind in ("study_guide", "faq", "timeline", "mind_map", "flashcards", "quiz", "audio"):
        page.set_viewport_size({"width": 1366, "height": 900})
        page.goto(f"/notebooks/{notebook.pk}/")
        pane = page.locator("#pane-studio")
        pane.get_by_test_id(f"studio-{kind}").click()
        row = pane.locator(f'[data-testid=studio-row][data-kind="{kind}"]').first
        try:
            expect(row).to_have_attribute("data-status", DONE, timeout=3 * WRITTEN)
        except AssertionError:
            worker.check_alive()
            raise AssertionError(f"{kind} not written; worker log:\n{worker.tail()}") from None
        assert row.get_attribute("data-status") == "ready", row.inner_text()
        row.locator("a.studio-title").click()
        expect(page.get_by_test_id("studio-output")).to_be_visible()
        cite(page, kind)
        written = StudioOutput.objects.get(kind=kind)
        page.get_by_test_id("studio-regenerate").click()
        expect(page.get_by_test_id("studio-status")).to_have_attribute(
            "data-status", "ready", timeout=3 * WRITTEN
        )
        again = StudioOutput.objects.get(kind=kind)
        assert again.token > written.token
        assert again.ready_at
        assert written.ready_at
        assert again.ready_at > written.ready_at

        page.set_viewport_size({"width": 390, "height": 844})
        page.reload()
        expect(page.get_by_test_id("studio-output")).to_be_visible()
        no_overflow(page)
        cite(page, kind)
        no_overflow(page)  # the focused chip's card too
        shoot(page, f"studio-390-{kind.replace('_', '-')}")
        page.get_by_test_id("studio-delete").click()
        page.get_by_test_id("studio-delete-confirm").click()
        page.wait_for_url(f"**/notebooks/{notebook.pk}/**")
        assert not StudioOutput.objects.filter(kind=kind).exists()
    assert not errors, errors


def test_with_a_chat_model_the_briefing_is_written_and_the_mind_map_has_themes(
    chat_page: Page, errors: list[str], notebook, tmp_path
) -> None:
    """A worker with a chat model (a local fake server speaking OpenAI's protocol, the strict
    profile: json_schema refused, so the JSON comes another way) writes the briefing from its
    quotes and groups the mind map's topics into themes; the pages say the model wrote them,
    the citations still open the viewer, at 1366 and 390 px."""
    from tests.fake_chat import fake_chat_server
    from tests.workers import run_worker

    page = chat_page
    with fake_chat_server("strict") as model, run_worker(
        log=tmp_path / "qcluster.log", CHAT_MODEL="fake-model",
        OPENAI_BASE_URL=f"{model.url}/v1", OPENAI_API_KEY="test-key",
    ) as running:  # fmt: skip
        page.set_viewport_size({"width": 1366, "height": 900})
        login(page, "erin", PASSWORD)
        page.goto(f"/notebooks/{notebook.pk}/")
        for kind in ("briefing", "mind_map"):
            make(page, kind, running)
    assert {o.model for o in StudioOutput.objects.all()} == {"fake-model"}
    rows = page.locator("#pane-studio [data-testid=studio-row]")
    rows.and_(page.locator('[data-kind="briefing"]')).locator("a.studio-title").click()
    expect(page.get_by_test_id("studio-provenance")).to_contain_text("Written by fake-model")
    cite(page, "briefing")
    shoot(page, "studio-1366-briefing-model")
    page.go_back()
    rows.and_(page.locator('[data-kind="mind_map"]')).locator("a.studio-title").click()
    expect(page.get_by_test_id("studio-provenance")).to_contain_text("named by fake-model")
    page.get_by_role("button", name="Expand all").click()
    expect(page.locator("[role=treeitem]", has_text="First theme").first).to_be_visible()
    cite(page, "mind_map")
    shoot(page, "studio-1366-mind-map-model")
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    no_overflow(page)
    shoot(page, "studio-390-mind-map-model")
    assert not errors, errors
