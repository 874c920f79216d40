"""Forgot your password, in Chromium: the login page's link, the address typed, the mail (read
from Django's locmem outbox: the live server answers in a thread of this process), the link
opened, a new password set, and the browser logged in on its notebooks. Screenshots of each
page at 1366 and 390 px, light and dark (test-artifacts/screenshots/reset-*.png)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.core import mail
from playwright.sync_api import Page, ViewportSize, expect

from tests.e2e.conftest import SCREENSHOTS
from tests.e2e.helpers import field, path_is

pytestmark = pytest.mark.e2e

NEW = "Brisk-Heron-7305"
SIZES: dict[str, ViewportSize] = {
    "1366": {"width": 1366, "height": 900},
    "390": {"width": 390, "height": 844},
}


def shoot(page: Page, name: str) -> None:
    """`name` at both widths and in both themes; at 390 px nothing sticks out sideways."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for width, size in SIZES.items():
        page.set_viewport_size(size)
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            page.screenshot(path=SCREENSHOTS / f"reset-{name}-{width}-{scheme}.png", full_page=True)
        wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 0, (name, width, wide)
    page.set_viewport_size(SIZES["1366"])
    page.emulate_media(color_scheme="light")


def test_forgot_password_mail_link_new_password_logged_in(page: Page, js_errors: list[str]):
    User.objects.create_user(username="dave", email="dave@example.org", password="Old-Pass-1")
    page.goto("/accounts/login/")
    shoot(page, "login")
    page.get_by_role("link", name="Forgot your password?").click()
    expect(page.get_by_role("heading", name="Forgot your password?")).to_be_visible()
    shoot(page, "form")
    field(page, "Email").fill("dave@example.org")
    page.get_by_role("button", name="Send the link").click()
    expect(page).to_have_url(path_is("/accounts/password/reset/sent/"))
    expect(page.get_by_test_id("reset-sent")).to_contain_text("The link works once")
    shoot(page, "sent")

    (message,) = mail.outbox
    assert message.to == ["dave@example.org"]
    link = re.search(r"https?://\S+/accounts/password/reset/\S+/\S+/", str(message.body))
    assert link, message.body
    page.goto(link.group(0))
    expect(page.get_by_role("heading", name="Set a new password")).to_be_visible()
    shoot(page, "confirm")
    field(page, "New password").fill(NEW)
    field(page, "New password confirmation").fill(NEW)
    page.get_by_role("button", name="Set password and log in").click()
    expect(page.get_by_test_id("reset-complete")).to_contain_text("you are logged in")
    shoot(page, "complete")
    page.get_by_role("link", name="Go to your notebooks").click()
    expect(page).to_have_url(path_is("/"))
    expect(page.get_by_role("heading", name="Your notebooks")).to_be_visible()
    expect(page.get_by_role("button", name=re.compile(r"Log out"))).to_contain_text("dave")

    # The link again: used up.
    page.goto(link.group(0))
    expect(page.get_by_test_id("reset-link-invalid")).to_be_visible()
    shoot(page, "used-link")
    assert User.objects.get(username="dave").check_password(NEW)
    # The used link's page is a 404 by design; nothing else went wrong.
    assert [e for e in js_errors if "/accounts/password/reset/" not in e] == []
