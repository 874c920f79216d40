"""A German and a Chinese browser see the interface in their language, scripts included (the
JavaScript catalogue loads under the strict CSP and copy.js speaks German)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from notes import services as note_services
from tests.e2e.conftest import SCREENSHOTS
from tests.e2e.helpers import path_is
from tests.factories import UserFactory

pytestmark = pytest.mark.e2e

PASSWORD = "correct horse battery staple"


def _context(browser: Browser, live_server, locale: str) -> BrowserContext:
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1366, "height": 900}, locale=locale
    )
    context.set_default_timeout(10_000)
    return context


@pytest.fixture
def german(browser: Browser, live_server, transactional_db) -> Iterator[Page]:
    context = _context(browser, live_server, "de-DE")
    yield context.new_page()
    context.close()


@pytest.fixture
def chinese(browser: Browser, live_server, transactional_db) -> Iterator[Page]:
    context = _context(browser, live_server, "zh-CN")
    yield context.new_page()
    context.close()


def _errors(page: Page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    page.on(
        "console",
        lambda msg: errors.append(msg.text) if msg.type == "error" else None,
    )
    return errors


def _shots(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for width, height in ((1366, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=Path(SCREENSHOTS, f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1366, "height": 900})


def _login(page: Page, username: str) -> None:
    page.goto("/accounts/login/")
    page.locator("#id_username").fill(username)
    page.locator("#id_password").fill(PASSWORD)
    page.locator("form button[type=submit]").click()
    expect(page).to_have_url(path_is("/"))


def test_a_german_browser_gets_german_pages_and_scripts(german: Page):
    errors = _errors(german)
    user = UserFactory.create(username="anna")
    notebook = note_services.notebook_create(owner=user, title="Lektüre")
    note_services.note_create(notebook=notebook, author=user, title="Erste Notiz")

    german.goto("/accounts/login/")
    expect(german.locator("html")).to_have_attribute("lang", "de")
    expect(german.get_by_role("heading", level=1)).to_have_text("Anmelden")
    _shots(german, "i18n-de-login")

    _login(german, "anna")
    expect(german.get_by_role("heading", level=1)).to_have_text("Deine Notizbücher")
    expect(german.locator(".badge").first).to_have_text("1 Notiz")
    _shots(german, "i18n-de-notebooks")

    german.goto("/settings/")
    german.locator("#id_name").fill("Backup")
    german.get_by_role("button", name="Token erstellen").click()
    german.get_by_role("button", name="Kopieren").click()
    status = german.locator('[data-copy-status="new-token"]')
    expect(status).to_have_text(
        # the Clipboard API, or the fallback when the headless browser refuses it
        re.compile(r"^(Kopiert|Markiert: .*)$")
    )
    _shots(german, "i18n-de-settings")
    assert errors == []


def test_a_chinese_browser_gets_chinese_pages(chinese: Page):
    errors = _errors(chinese)
    UserFactory.create(username="li")
    chinese.goto("/accounts/login/")
    expect(chinese.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(chinese.get_by_role("heading", level=1)).to_have_text("登录")
    _login(chinese, "li")
    expect(chinese.get_by_role("heading", level=1)).to_have_text("你的笔记本")
    _shots(chinese, "i18n-zh-notebooks")
    chinese.goto("/settings/")
    expect(chinese.get_by_role("heading", level=1)).to_have_text("设置")
    _shots(chinese, "i18n-zh-settings")
    assert errors == []
