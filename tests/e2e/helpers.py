"""Small helpers shared by the browser tests."""

from __future__ import annotations

import re

from playwright.sync_api import Locator, Page, expect


def field(scope: Page | Locator, label: str) -> Locator:
    """The form control whose label is exactly `label` (help text and errors sit outside it)."""
    return scope.get_by_label(label, exact=True)


def path_is(path: str) -> re.Pattern[str]:
    """Matches a live-server URL whose path (and query, if any) is exactly `path`."""
    return re.compile(rf"^https?://[^/]+{re.escape(path)}$")


def login(page: Page, username: str, password: str) -> None:
    page.goto("/accounts/login/")
    field(page, "Username").fill(username)
    field(page, "Password").fill(password)
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page).to_have_url(path_is("/"))
    # The URL changes when the navigation commits, before the new document has a body: a test
    # that scripts the page at once found `document.body` null.
    page.wait_for_load_state("domcontentloaded")
