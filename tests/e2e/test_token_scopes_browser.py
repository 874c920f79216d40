"""Settings → Personal access tokens in the browser: a scoped token is created and its scope
listed, at desktop and phone widths (screenshots in test-artifacts/screenshots/)."""

from __future__ import annotations

import pytest

from notes.services import notebook_create
from tests.e2e.helpers import login

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("width", [1366, 390])
def test_a_scoped_token_is_created_and_listed(page, live_server, alice, js_errors, screenshot,
                                              width):  # fmt: skip
    notebook_create(owner=alice, title="Garden")
    notebook_create(owner=alice, title="Kitchen with a rather long notebook title to wrap")
    page.set_viewport_size({"width": width, "height": 900})
    login(page, "alice", "correct horse battery staple")
    page.goto("/settings/#tokens")
    page.fill("input[name=name]", "assistant")
    page.get_by_test_id("token-read-only").check()
    page.get_by_label("Garden").check()
    page.get_by_role("button", name="Create token").click()
    scope = page.get_by_test_id("token-scope").first
    scope.wait_for()
    assert scope.inner_text() == "read-only · Garden"
    assert page.locator("#new-token").input_value().startswith("nbk_")
    # Nothing overflows the phone's width.
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(f"token-scopes-{width}")
    assert js_errors == []
