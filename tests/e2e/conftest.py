"""Browser tests: Debian's Chromium, driven by Playwright, against pytest-django's live_server.

No browser is downloaded: we launch the system Chromium (CHROMIUM, default /usr/bin/chromium),
which `make test` installs with apt-get when it is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Request,
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

    def on_failed(request: Request) -> None:
        # A request the browser dropped because the page navigated away (the login redirect
        # followed by a goto) is no error of the page's.
        if request.failure != "net::ERR_ABORTED":
            errors.append(f"failed: {request.method} {request.url} {request.failure}")

    page.on("requestfailed", on_failed)
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


# --- The real site under daphne, watched for policy violations (page tour, accessibility) ----

# Reports every Content-Security-Policy violation to the test, from every page of the context,
# before any script of the page runs. Chromium also logs them to the console; the event is the
# dependable signal (it fires for blocked inline styles as well, and carries the directive).
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
    window.__cspViolation({
        directive: event.violatedDirective,
        blocked: event.blockedURI,
        source: event.sourceFile,
        line: event.lineNumber,
        sample: event.sample,
        page: location.href,
    });
});
"""


def _real_asgi_application() -> Any:  # module level: the daphne child process calls it
    from channels.routing import get_default_application
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    return ASGIStaticFilesHandler(get_default_application())


@pytest.fixture
def site_server(transactional_db) -> Iterator[str]:
    """The whole application as in production: notebook.asgi under daphne, its own middleware
    (the real Content-Security-Policy, no test policy added), WebSockets for the chat."""
    from tests.daphne_server import start_daphne

    server = start_daphne(_real_asgi_application)
    try:
        yield f"http://localhost:{server.port.value}"
    finally:
        server.terminate()
        server.join(10)


@dataclass
class PageProblems:
    """What a policy-abiding, working page never causes: CSP violations, console errors and
    warnings (a CSP violation is also logged there), uncaught exceptions."""

    violations: list[dict[str, Any]] = field(default_factory=list)
    console: list[str] = field(default_factory=list)

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning") or "Content Security Policy" in message.text:
            where = message.location.get("url", "")
            self.console.append(f"console.{message.type}: {message.text} ({where})")

    def take(self) -> list[str]:
        """Everything reported since the last call, and forget it."""
        found = [f"CSP violation: {v}" for v in self.violations] + self.console
        self.violations.clear()
        self.console.clear()
        return found


@pytest.fixture
def site_problems() -> PageProblems:
    return PageProblems()


@pytest.fixture
def site_context(
    browser: Browser, site_server: str, site_problems: PageProblems
) -> Iterator[BrowserContext]:
    """A fresh profile on `site_server` at 1366x900 that reports into `site_problems`."""
    context = browser.new_context(
        base_url=site_server, viewport={"width": 1366, "height": 900}, locale="en-US"
    )
    context.set_default_timeout(15_000)
    context.expose_binding("__cspViolation", lambda _source, v: site_problems.violations.append(v))
    context.add_init_script(REPORT_CSP_VIOLATIONS)
    yield context
    context.close()


@pytest.fixture
def site_page(site_context: BrowserContext, site_problems: PageProblems) -> Page:
    page = site_context.new_page()
    page.on("console", site_problems.on_console)
    page.on("pageerror", lambda exc: site_problems.console.append(f"uncaught: {exc}"))
    return page


@dataclass
class Tour:
    """A user with something on every main page: a notebook, a note with an ingested PDF,
    a conversation with an answer, a memory; and a second user with nothing yet."""

    username: str
    newcomer: str
    password: str
    notebook_id: int
    note_id: int
    attachment_id: int
    conversation_id: int
    search_query: str


@pytest.fixture
def tour(transactional_db, settings) -> Tour:
    """The Tour's data, committed. Built once per session through the real services; later
    tests get the very same rows (and stored files) copied back after the flush, which is what
    building it again would commit, without re-ingesting the PDF and re-answering."""
    global _tour_snapshot
    if _tour_snapshot is not None and _tour_snapshot.restore(Path(settings.MEDIA_ROOT)):
        return _tour_snapshot.tour
    before = _TableState.now()
    built = _build_tour()
    _tour_snapshot = _TourSnapshot.take(built, before, Path(settings.MEDIA_ROOT))
    return built


SNAPSHOT_SCHEMA = "e2e_tour_snapshot"  # outside the search path: flushes never see it


@dataclass
class _TableState:
    """Which of Django's tables hold rows, and how many."""

    counts: dict[str, int]

    @classmethod
    def now(cls) -> _TableState:
        from django.db import connection

        tables = connection.introspection.django_table_names(only_existing=True)
        with connection.cursor() as cursor:
            counts = {}
            for table in sorted(tables):
                name = connection.ops.quote_name(table)  # names from Django's introspection
                cursor.execute(f"SELECT count(*) FROM {name}")  # noqa: S608
                row = cursor.fetchone()
                counts[table] = row[0] if row else 0
        return cls(counts)


@dataclass
class _TourSnapshot:
    """The rows `_build_tour` added, kept in SNAPSHOT_SCHEMA, and the files it stored."""

    tour: Tour
    tables: list[str]
    media: Path

    @classmethod
    def take(cls, tour: Tour, before: _TableState, media: Path) -> _TourSnapshot | None:
        """Only when the build filled tables that were empty and changed no other: then the
        rows in them are exactly the build's. Otherwise None (the next test builds again)."""
        from django.db import connection

        after = _TableState.now()
        filled = [t for t, n in after.counts.items() if n and not before.counts.get(t)]
        changed = [
            t for t, n in after.counts.items() if before.counts.get(t) and n != before.counts[t]
        ]
        if changed or set(after.counts) != set(before.counts):
            return None
        with connection.cursor() as cursor:
            cursor.execute(f"DROP SCHEMA IF EXISTS {SNAPSHOT_SCHEMA} CASCADE")
            cursor.execute(f"CREATE SCHEMA {SNAPSHOT_SCHEMA}")
            for table in filled:
                name = connection.ops.quote_name(table)
                cursor.execute(f"CREATE TABLE {SNAPSHOT_SCHEMA}.{name} AS TABLE {name}")
        return cls(tour, filled, media)

    def restore(self, media: Path) -> bool:
        """Copy the rows back into the (flushed) tables; False, touching nothing, when one of
        them is not empty."""
        from django.apps import apps
        from django.core.management.color import no_style
        from django.db import connection, transaction

        now = _TableState.now()
        if any(now.counts.get(table, 1) for table in self.tables):
            return False
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
            for table in self.tables:
                name = connection.ops.quote_name(table)
                cursor.execute(f"INSERT INTO {name} SELECT * FROM {SNAPSHOT_SCHEMA}.{name}")  # noqa: S608
            # Past the restored ids, whatever the flush did to the sequences.
            models = [
                m for m in apps.get_models(include_auto_created=True)
                if m._meta.db_table in self.tables and m._meta.managed and not m._meta.proxy
            ]  # fmt: skip
            for sql in connection.ops.sequence_reset_sql(no_style(), models):
                cursor.execute(sql)
        shutil.copytree(self.media, media, dirs_exist_ok=True)
        return True


_tour_snapshot: _TourSnapshot | None = None


def _build_tour() -> Tour:
    """What `tour` holds, made through the real services (ingestion, answer, memory)."""
    from django.contrib.auth.models import User

    from chat import services as chat_services
    from chat.agent import generate
    from chat.memory import memory_remember
    from notes.services import note_create, notebook_create
    from tests.fixtures.documents import ingest, upload

    password = "Sturdy-Tulip-4821"
    dana = User.objects.create_user(username="dana", password=password)
    User.objects.create_user(username="newcomer", password=password)
    notebook = notebook_create(
        owner=dana, title="Tools and friends", description="Manuals I keep looking up."
    )
    note = note_create(
        notebook=notebook, author=dana, title="Lantern notes",
        body="# Why\n\nThe **lantern** tool builds my website. See the manual below.",
    )  # fmt: skip
    note_create(notebook=notebook, author=dana, title="Empty for now")
    attachment = ingest(upload(dana, note, "manual.pdf"))  # tests/samples/
    assert attachment.status == "ready", attachment.error
    conversation = chat_services.conversation_create(owner=dana, notebook=notebook)
    _, pending = chat_services.message_ask(
        conversation=conversation,
        content="What does lantern build check before it writes anything?",
    )
    done = generate(pending.pk, lambda event, data: None)
    assert done is not None
    assert done.status == "complete", done
    memory_remember(
        owner=dana, notebook=notebook, kind="preference",
        text="Prefers short answers with the page number.", importance=0.7,
    )  # fmt: skip
    return Tour(
        username="dana",
        newcomer="newcomer",
        password=password,
        notebook_id=notebook.pk,
        note_id=note.pk,
        attachment_id=attachment.pk,
        conversation_id=conversation.pk,
        search_query="publish the public folder",
    )
