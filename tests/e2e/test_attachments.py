"""PDFs on a note in a real browser: drop or select files, watch a real worker process them.

The worker is a real django-q2 cluster (`manage.py qcluster`) started as a subprocess against
the live server's test database; `transactional_db` commits the test's data so it sees it.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import FilePayload, JSHandle, Locator, Page, expect

from notes.models import Note
from notes.services import note_create, notebook_create
from tests.e2e.helpers import login
from tests.fixtures.documents import SAMPLE_PASSWORD, sample, upload
from tests.workers import Worker, run_worker

pytestmark = pytest.mark.e2e

PASSWORD = "Sturdy-Tulip-4821"
READY_TIMEOUT = 180  # seconds for the worker to take a PDF from upload to "Ready"
READY = re.compile(r"(^|\s)status-ready(\s|$)")


# --- The worker ------------------------------------------------------------------------------


@pytest.fixture
def worker(live_server, transactional_db, tmp_path: Path) -> Iterator[Worker]:
    """A real `manage.py qcluster` on the test database; it depends on transactional_db, so it
    is stopped before the database is flushed."""
    with run_worker(log=tmp_path / "qcluster.log") as running:
        yield running


# --- Data and helpers ------------------------------------------------------------------------


@pytest.fixture
def erin(transactional_db) -> User:
    return User.objects.create_user(username="erin", password=PASSWORD)


@pytest.fixture
def note(erin: User) -> Note:
    notebook = notebook_create(owner=erin, title="Papers")
    return note_create(notebook=notebook, author=erin, title="Reading notes", body="Some text.")


def open_note(page: Page, note: Note) -> None:
    login(page, "erin", PASSWORD)
    page.goto(f"/notes/{note.pk}/")
    expect(page.locator("#note-title")).to_have_text(note.title)
    expect(page.get_by_text("No PDFs on this note yet.", exact=True)).to_be_visible()
    page.evaluate("window.__sameDocument = true")


def pdf(name: str, *, as_name: str | None = None) -> FilePayload:
    """A file payload for set_input_files: a sample (tests/samples/), optionally under another
    name."""
    return {"name": as_name or name, "mimeType": "application/pdf", "buffer": sample(name)}


def drop(page: Page, files: list[FilePayload]) -> None:
    """Drop `files` on the drop zone as a user dragging them from the desktop would."""
    payload = [
        {"name": f["name"], "type": f["mimeType"], "data": base64.b64encode(f["buffer"]).decode()}
        for f in files
    ]
    data_transfer: JSHandle = page.evaluate_handle(
        """(files) => {
            const dt = new DataTransfer();
            for (const f of files) {
                const binary = atob(f.data);
                const bytes = new Uint8Array(binary.length);
                for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
                dt.items.add(new File([bytes], f.name, { type: f.type }));
            }
            return dt;
        }""",
        payload,
    )
    zone = page.locator("[data-dropzone]")
    zone.dispatch_event("dragenter", {"dataTransfer": data_transfer})
    zone.dispatch_event("dragover", {"dataTransfer": data_transfer})
    expect(zone).to_have_class(re.compile(r"(^|\s)dragging(\s|$)"))
    zone.dispatch_event("drop", {"dataTransfer": data_transfer})
    expect(zone).not_to_have_class(re.compile(r"(^|\s)dragging(\s|$)"))
    data_transfer.dispose()


def watch_rows(page: Page) -> None:
    """Records, per attachment row id, every status it had and whether it showed a progress bar
    while queued or processing. Rows are swapped often (polling), so a one-off check would race
    the worker; the observer sees every version of every row."""
    page.evaluate(
        """() => {
            const list = document.getElementById("attachment-list");
            window.__rows = {};
            const scan = () => {
                list.querySelectorAll(":scope > li[id^='attachment-']").forEach((li) => {
                    const seen = (window.__rows[li.id] ||= { statuses: [], progress: false });
                    const status = li.dataset.status;
                    if (seen.statuses.at(-1) !== status) seen.statuses.push(status);
                    if ((status === "pending" || status === "processing")
                        && li.querySelector("progress")) seen.progress = true;
                });
            };
            new MutationObserver(scan).observe(list, { childList: true, subtree: true });
            scan();
        }"""
    )


def seen_rows(page: Page) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = page.evaluate("window.__rows")
    return rows


def row_named(page: Page, name: str) -> Locator:
    return page.locator("#attachment-list > li[id^='attachment-']").filter(
        has=page.locator(".attachment-name").get_by_text(name, exact=True)
    )


def wait_until_ready(row: Locator, worker: Worker, timeout: float = READY_TIMEOUT) -> None:
    """Wait for the row (refreshed in place by its own polling) to reach "Ready"."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            expect(row).to_have_class(READY, timeout=2_000)
            break
        except AssertionError:
            worker.check_alive()
            if time.monotonic() > deadline:
                state = row.get_attribute("data-status") if row.count() == 1 else "no row"
                raise AssertionError(
                    f"not ready after {timeout} s (status: {state}); worker log:\n{worker.tail()}"
                ) from None
    expect(row.get_by_test_id("status")).to_have_text("Ready")
    expect(row.locator("progress")).to_have_count(0)


def assert_same_document(page: Page) -> None:
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"


# --- Tests -----------------------------------------------------------------------------------


def test_drop_two_pdfs_and_watch_them_become_ready(
    page: Page,
    js_errors: list[str],
    screenshot: Callable[[str], Path],
    note: Note,
    worker: Worker,
) -> None:
    open_note(page, note)
    watch_rows(page)
    rows = page.locator("#attachment-list > li")

    drop(page, [pdf("text.pdf"), pdf("other.pdf")])

    # One row per file, at once: first the upload placeholder, then the server's status row.
    expect(rows).to_have_count(2)
    text_row, other_row = row_named(page, "text.pdf"), row_named(page, "other.pdf")
    expect(text_row).to_have_count(1)
    expect(other_row).to_have_count(1)
    expect(page.get_by_text("No PDFs on this note yet.", exact=True)).to_have_count(0)
    if other_row.locator("progress").count():  # the worker may already be done with it
        screenshot("attachments_processing")

    wait_until_ready(text_row, worker)
    wait_until_ready(other_row, worker)
    expect(rows).to_have_count(2)
    assert_same_document(page)
    expect(text_row).to_contain_text("3 pages")
    expect(other_row).to_contain_text("2 pages")
    expect(other_row.get_by_role("link", name="other.pdf", exact=True)).to_be_visible()
    expect(other_row.get_by_role("link", name="Open", exact=True)).to_be_visible()
    expect(other_row.get_by_role("button", name="Reprocess", exact=True)).to_be_visible()

    seen = seen_rows(page)
    assert len(seen) == 2, seen
    for row_id, history in seen.items():
        assert history["progress"], f"{row_id} never showed a progress bar: {history}"
        assert history["statuses"][0] in ("pending", "processing"), history
        assert history["statuses"][-1] == "ready", history
    screenshot("attachments_ready")

    # The extracted text, page by page.
    other_row.get_by_role("link", name="Page text", exact=True).click()
    expect(page).to_have_url(re.compile(r"/attachments/\d+/pages/$"))
    expect(page.get_by_role("heading", name="other.pdf", exact=True)).to_be_visible()
    expect(page.get_by_role("heading", name="Page 1", exact=True)).to_be_visible()
    expect(page.locator("#page-1")).to_contain_text("Sourdough Starter")
    expect(page.locator("#page-2")).to_contain_text("Baking the Loaf")
    expect(page.locator("article.page-text")).to_have_count(2)
    screenshot("attachments_page_text")

    assert js_errors == []


def test_select_files_button_uploads(
    page: Page,
    js_errors: list[str],
    note: Note,
    worker: Worker,
) -> None:
    open_note(page, note)
    watch_rows(page)
    expect(page.locator("label").filter(has_text="Select files")).to_be_visible()

    page.locator("input[data-file-input]").set_input_files(pdf("text.pdf", as_name="survey.pdf"))

    row = row_named(page, "survey.pdf")
    expect(row).to_have_count(1)
    wait_until_ready(row, worker)
    expect(page.locator("#attachment-list > li")).to_have_count(1)
    assert page.locator("input[data-file-input]").input_value() == ""  # ready for the next pick
    (history,) = seen_rows(page).values()
    assert history["progress"], history
    assert_same_document(page)
    assert js_errors == []


def test_password_protected_pdf_unlocks_through_the_dialog(
    page: Page,
    js_errors: list[str],
    screenshot: Callable[[str], Path],
    note: Note,
    worker: Worker,
) -> None:
    open_note(page, note)

    page.locator("input[data-file-input]").set_input_files(pdf("locked.pdf"))

    row = row_named(page, "locked.pdf")
    expect(row.get_by_test_id("status")).to_have_text("Needs password")
    expect(row).to_have_attribute("data-status", "needs_password")
    expect(row).to_contain_text("This PDF is password-protected.")
    expect(row.locator("progress")).to_have_count(0)
    dialog = page.get_by_role("dialog", name="Unlock “locked.pdf”", exact=True)
    expect(dialog).to_be_hidden()

    # A wrong password: the row comes back with the error and the dialog open again.
    row.get_by_role("button", name="Enter password", exact=True).click()
    expect(dialog).to_be_visible()
    password = dialog.get_by_label("Password", exact=True)
    expect(password).to_be_focused()
    password.fill("open sesame?")
    dialog.get_by_role("button", name="Unlock", exact=True).click()

    expect(row.get_by_test_id("row-error")).to_have_text("Wrong password. 2 attempts left.")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("alert")).to_have_text("Wrong password. 2 attempts left.")
    expect(row).to_contain_text("1 wrong attempt so far.")
    expect(row.get_by_test_id("status")).to_have_text("Needs password")
    password = dialog.get_by_label("Password", exact=True)
    expect(password).to_have_value("")  # a fresh form: the wrong password is not echoed back
    screenshot("attachments_password_dialog")

    # The right one: the row is queued, then the worker reads the file.
    password.fill(SAMPLE_PASSWORD)
    dialog.get_by_role("button", name="Unlock", exact=True).click()
    expect(dialog).to_have_count(0)
    expect(row.get_by_test_id("row-error")).to_have_count(0)
    wait_until_ready(row, worker)
    expect(row).to_contain_text("3 pages")
    assert_same_document(page)
    screenshot("attachments_unlocked")

    # The text is readable: the password was right and it opened the file.
    row.get_by_role("link", name="Page text", exact=True).click()
    expect(page.get_by_role("heading", name="Page 1", exact=True)).to_be_visible()
    expect(page.locator("article.page-text").first).not_to_contain_text("No text on this page.")
    expect(page.locator("#page-1")).to_contain_text("The grey heron waits motionless")

    assert js_errors == []


def test_fake_pdf_and_duplicate_show_error_rows(
    page: Page,
    js_errors: list[str],
    screenshot: Callable[[str], Path],
    erin: User,
    note: Note,
    live_server,
) -> None:
    existing = upload(erin, note, "text.pdf")  # queued; no worker needed here
    login(page, "erin", PASSWORD)
    page.goto(f"/notes/{note.pk}/")
    page.evaluate("window.__sameDocument = true")
    rows = page.locator("#attachment-list > li")
    expect(rows).to_have_count(1)
    upload_url = f"{live_server.url}/notes/{note.pk}/attachments/"

    # HTML dressed up as a PDF is refused, and nothing is stored.
    fake = b"<!doctype html><html><body><script>window.pwned = 1</script></body></html>"
    with page.expect_response(upload_url):
        drop(page, [{"name": "evil.pdf", "mimeType": "application/pdf", "buffer": fake}])
    expect(rows).to_have_count(2)
    evil = rows.filter(has_text="evil.pdf")
    expect(evil).to_have_class(re.compile(r"(^|\s)upload-error(\s|$)"))
    expect(evil.locator(".error-text")).to_contain_text("“evil.pdf” is not a PDF")
    expect(evil.locator("progress")).to_have_count(0)
    assert page.evaluate("window.pwned") is None

    # The same content under another name is recognised as a duplicate and points at the row.
    with page.expect_response(upload_url):
        drop(page, [pdf("text.pdf", as_name="copy of text.pdf")])
    expect(rows).to_have_count(3)
    duplicate = rows.filter(has_text="already attached")
    expect(duplicate.locator(".error-text")).to_contain_text(
        "“text.pdf” is already attached to this note."
    )
    show = duplicate.get_by_role("link", name="Show “text.pdf”", exact=True)
    expect(show).to_have_attribute("href", f"#attachment-{existing.pk}")
    screenshot("attachments_upload_errors")
    show.click()
    expect(page).to_have_url(re.compile(rf"#attachment-{existing.pk}$"))
    expect(page.locator(f"#attachment-{existing.pk}")).to_be_in_viewport()

    # Error rows can be dismissed; the real row stays.
    evil.get_by_role("button", name="Dismiss", exact=True).click()
    duplicate.get_by_role("button", name="Dismiss", exact=True).click()
    expect(rows).to_have_count(1)
    expect(page.locator(f"#attachment-{existing.pk}")).to_be_visible()
    assert existing.note.attachments.count() == 1
    assert_same_document(page)

    # The refusals are real HTTP errors (400, 409); nothing else went wrong.
    assert js_errors == [f"HTTP 400: POST {upload_url}", f"HTTP 409: POST {upload_url}"]
