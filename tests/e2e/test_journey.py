"""A user's first session in a real browser: sign up, notebook, note, Markdown, trash, rename."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.e2e.helpers import field, login, path_is

pytestmark = pytest.mark.e2e

PASSWORD = "Sturdy-Tulip-4821"
MARKDOWN = (
    "# Heading\n\n"
    "Some **bold** text and a [link](https://example.org).\n\n"
    "<script>window.pwned=1</script>"
)


@contextmanager
def htmx_swap(page: Page, method: str, path: str) -> Iterator[None]:
    """Asserts the block makes one HTMX request to `path` and the page is not reloaded."""
    page.evaluate("window.__sameDocument = true")
    with page.expect_response(
        lambda r: r.request.method == method and urlsplit(r.url).path == path
    ) as response_info:
        yield
    response = response_info.value
    assert response.request.headers.get("hx-request") == "true", "not an HTMX request"
    assert response.status == 200, f"{method} {path} answered {response.status}"
    page.wait_for_load_state()
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"


def test_signup_notebook_note_edit_trash_restore(
    page: Page, js_errors: list[str], screenshot: Callable[[str], Path]
) -> None:
    main = page.get_by_role("main")

    # Anonymous: the home page sends us to log in, and from there to sign up.
    page.goto("/")
    expect(page).to_have_url(path_is("/accounts/login/?next=/"))
    expect(page.get_by_role("heading", name="Log in", exact=True)).to_be_visible()
    screenshot("login")
    main.get_by_role("link", name="Sign up", exact=True).click()

    expect(page).to_have_url(path_is("/accounts/signup/"))
    expect(page.get_by_role("heading", name="Create your account", exact=True)).to_be_visible()
    screenshot("signup")
    field(page, "Username").fill("carol")
    field(page, "Password").fill(PASSWORD)
    field(page, "Password confirmation").fill(PASSWORD)
    main.get_by_role("button", name="Sign up", exact=True).click()

    # Signed up and logged in: an empty notebook list.
    expect(page).to_have_url(path_is("/"))
    expect(page.get_by_role("heading", name="Your notebooks", exact=True)).to_be_visible()
    expect(page.get_by_role("status")).to_contain_text("Welcome to Notebook")
    expect(page.get_by_role("button", name="Log out (carol)", exact=True)).to_be_visible()
    expect(page.get_by_text("No notebooks yet.", exact=True)).to_be_visible()

    # Create a notebook: it opens at once.
    new_notebook = page.locator("form").filter(
        has=page.get_by_role("heading", name="New notebook", exact=True)
    )
    field(new_notebook, "Title").fill("Reading list")
    new_notebook.get_by_role("button", name="Create notebook", exact=True).click()
    expect(page).to_have_url(re.compile(r"/notebooks/\d+/$"))
    notebook_path = urlsplit(page.url).path
    notebook_id = int(notebook_path.strip("/").split("/")[-1])
    expect(page.get_by_role("heading", name="Reading list", exact=True)).to_be_visible()
    expect(page.get_by_text("No notes yet.", exact=True)).to_be_visible()
    screenshot("notebook_detail")
    # The list has it, with no notes yet.
    page.goto("/")
    notebook_link = page.get_by_role("link", name="Reading list", exact=True)
    notebook_row = page.locator("#notebook-list > li").filter(has=notebook_link)
    expect(notebook_row).to_have_count(1)
    expect(notebook_row.locator(".badge")).to_have_text("0 notes")
    expect(page.get_by_text("No notebooks yet.", exact=True)).to_have_count(0)
    screenshot("notebook_list")
    notebook_link.click()
    expect(page).to_have_url(path_is(notebook_path))
    page.get_by_role("textbox", name="Title of the new note", exact=True).fill("First thoughts")
    page.get_by_role("button", name="New note", exact=True).click()

    # The editor: preview with HTMX, then save.
    expect(page).to_have_url(re.compile(r"/notes/\d+/edit/$"))
    note_id = int(urlsplit(page.url).path.strip("/").split("/")[1])
    expect(field(page, "Title")).to_have_value("First thoughts")
    body = field(page, "Body")
    expect(body).to_have_attribute("name", "body")
    body.fill(MARKDOWN)
    with htmx_swap(page, "POST", f"/notes/{note_id}/preview/"):
        page.get_by_role("button", name="Preview", exact=True).click()
    preview = page.locator("#preview")
    expect(preview.locator("h1")).to_have_text("Heading")
    expect(preview.locator("strong")).to_have_text("bold")
    expect(preview.locator("script")).to_have_count(0)
    expect(preview).to_contain_text("<script>window.pwned=1</script>")
    assert page.evaluate("window.pwned") is None
    screenshot("note_edit")
    page.get_by_role("button", name="Save", exact=True).click()

    # The note, rendered: Markdown yes, the author's <script> no.
    expect(page).to_have_url(path_is(f"/notes/{note_id}/"))
    expect(page.get_by_role("status")).to_have_text("Saved.")
    expect(page.locator("#note-title")).to_have_text("First thoughts")
    note_body = page.locator("#note-body")
    expect(note_body.locator("h1")).to_have_text("Heading")
    expect(note_body.locator("strong")).to_have_text("bold")
    link = note_body.get_by_role("link", name="link", exact=True)
    expect(link).to_have_attribute("href", "https://example.org")
    expect(link).to_have_attribute("rel", re.compile(r"(^|\s)noopener(\s|$)"))
    expect(note_body.locator("script")).to_have_count(0)
    expect(note_body).to_contain_text("<script>window.pwned=1</script>")
    assert page.evaluate("window.pwned") is None, "the note's <script> ran"
    screenshot("note_detail")

    # Trash it (a plain form post) and land back on the notebook.
    page.get_by_role("button", name="Move to trash", exact=True).click()
    expect(page).to_have_url(path_is(notebook_path))
    expect(page.get_by_role("status")).to_have_text("Moved “First thoughts” to the trash.")
    live_note = page.locator(f"#note-{note_id}")
    trashed_note = page.locator(f"#trashed-note-{note_id}")
    expect(live_note).to_have_count(0)
    expect(page.get_by_text("No notes yet.", exact=True)).to_be_visible()
    trash = page.locator("details.trash")
    expect(trash).not_to_have_attribute("open", "")
    trash.get_by_text("Trash (1)", exact=True).click()
    expect(trashed_note).to_be_visible()
    expect(trashed_note.get_by_role("link", name="First thoughts", exact=True)).to_be_visible()
    screenshot("trash")

    # Restore it from the trash: HTMX swaps #notes.
    with htmx_swap(page, "POST", f"/notes/{note_id}/restore/"):
        trashed_note.get_by_role("button", name="Restore", exact=True).click()
    expect(live_note).to_be_visible()
    expect(live_note.get_by_role("link", name="First thoughts", exact=True)).to_be_visible()
    expect(trashed_note).to_have_count(0)
    expect(page.locator("details.trash > summary")).to_have_text("Trash (0)")
    expect(page.get_by_role("status")).to_have_text("Restored “First thoughts”.")
    expect(page).to_have_url(path_is(notebook_path))

    # Rename the notebook in place on the list.
    page.get_by_role("navigation").get_by_role("link", name="Notebooks", exact=True).click()
    expect(page).to_have_url(path_is("/"))
    row = page.locator(f"#notebook-{notebook_id}")
    expect(row.locator(".badge")).to_have_text("1 note")
    with htmx_swap(page, "GET", f"/notebooks/{notebook_id}/rename/"):
        row.get_by_role("link", name="Rename", exact=True).click()
    title = field(row, "Title")
    expect(title).to_have_value("Reading list")
    title.fill("Papers to read")
    with htmx_swap(page, "POST", f"/notebooks/{notebook_id}/rename/"):
        row.get_by_role("button", name="Save", exact=True).click()
    expect(row.get_by_role("link", name="Papers to read", exact=True)).to_be_visible()
    expect(row.get_by_role("link", name="Reading list", exact=True)).to_have_count(0)
    expect(row.locator(".badge")).to_have_text("1 note")
    expect(row.get_by_role("button", name="Save", exact=True)).to_have_count(0)

    assert js_errors == []


def test_anonymous_is_sent_to_login(page: Page, js_errors: list[str]) -> None:
    page.goto("/notebooks/1/")

    expect(page).to_have_url(re.compile(r"/accounts/login/\?next="))
    assert parse_qs(urlsplit(page.url).query)["next"] == ["/notebooks/1/"]
    expect(page.get_by_role("heading", name="Log in", exact=True)).to_be_visible()
    expect(page.locator("input[name=next]")).to_have_value("/notebooks/1/")
    assert js_errors == []


def test_htmx_is_loaded_without_inline_scripts(page: Page, js_errors: list[str]) -> None:
    User.objects.create_user(username="dave", password=PASSWORD)

    login(page, "dave", PASSWORD)

    expect(page.get_by_role("heading", name="Your notebooks", exact=True)).to_be_visible()
    assert page.evaluate("typeof window.htmx") == "object"
    # Only external scripts, so a strict Content-Security-Policy (script-src 'self') can work.
    assert page.locator("script[src]").count() >= 1
    assert page.locator("script:not([src])").count() == 0
    assert js_errors == []
