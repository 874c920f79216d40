"""Browser tests: Debian's Chromium, driven by Playwright, against pytest-django's live_server.

No browser is downloaded: we launch the system Chromium (CHROMIUM, default /usr/bin/chromium),
which `make test` installs with apt-get when it is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Response,
    sync_playwright,
)

# Playwright's sync API runs an asyncio event loop in the main thread (inside a greenlet) from
# the moment the session-scoped browser starts until the session ends. Django sees that running
# loop and refuses every ORM call made from this thread with SynchronousOnlyOperation, although
# they are plain synchronous code: users created in a test, pytest-django's flush between
# transactional tests, and every later non-browser test in the same pytest run. No coroutine ever
# touches the ORM here (the live server answers requests in its own thread), so the check is a
# false alarm and we turn it off for the test process.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    executable = shutil.which(CHROMIUM)
    if executable is None:
        # Fail, never skip: a skipped browser suite looks green while testing nothing.
        pytest.fail(
            f"The browser tests need Chromium at {CHROMIUM}, which is missing. Install it with:\n"
            "    apt-get install -y chromium\n"
            "(`make test` does this when run as root) or set CHROMIUM=/path/to/chromium.",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture
def context(browser: Browser, live_server, transactional_db) -> Iterator[BrowserContext]:
    """A fresh browser profile (no cookies) whose relative URLs go to the live server."""
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 900}, locale="en-US"
    )
    context.set_default_timeout(10_000)
    yield context
    context.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


@pytest.fixture
def js_errors(page: Page) -> list[str]:
    """JavaScript errors and failed requests of `page`; tests assert it stays empty."""
    errors: list[str] = []

    def on_console(msg: ConsoleMessage) -> None:
        # "Failed to load resource" names no URL; the response listener below reports those.
        if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
            errors.append(f"console.error: {msg.text}")

    def on_response(response: Response) -> None:
        if response.status >= 400:
            errors.append(f"HTTP {response.status}: {response.request.method} {response.url}")

    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    page.on("console", on_console)
    page.on("response", on_response)
    page.on("requestfailed", lambda r: errors.append(f"failed: {r.method} {r.url} {r.failure}"))
    return errors


@pytest.fixture
def screenshot(page: Page) -> Callable[[str], Path]:
    """`screenshot("name")` saves a full-page PNG to test-artifacts/screenshots/name.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=path, full_page=True)
        return path

    return take
