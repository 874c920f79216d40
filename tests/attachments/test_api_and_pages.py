from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from attachments import services
from attachments.models import NoteAttachment
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import SAMPLE_PASSWORD, sample, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def note(alice):
    return NoteFactory.create(notebook=NotebookFactory.create(owner=alice))


def pdf(name: str, as_name: str | None = None) -> SimpleUploadedFile:
    return SimpleUploadedFile(as_name or name, sample(name), "application/pdf")


def test_api_upload_several_files_reports_each(alice_api, note):
    response = alice_api.post(
        f"/api/notes/{note.pk}/attachments",
        {"files": [pdf("text.pdf"), pdf("other.pdf"), SimpleUploadedFile("x.pdf", b"<html>")]},
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert sorted(a["original_name"] for a in body["attachments"]) == ["other.pdf", "text.pdf"]
    assert body["errors"] == [
        {"file": "x.pdf", "detail": "“x.pdf” is not a PDF (its content does not start like one, "
         "whatever its name).", "code": "not_pdf", "existing_id": None, "existing_note_id": None}
    ]  # fmt: skip
    assert body["notes"] == []
    assert {a["status"] for a in body["attachments"]} == {"pending"}


def test_api_upload_duplicate_is_409_with_the_existing_id(alice_api, alice, note):
    existing = upload(alice, note, "text.pdf")
    response = alice_api.post(f"/api/notes/{note.pk}/attachments", {"files": [pdf("text.pdf")]})
    assert response.status_code == 409
    assert response.json()["errors"][0]["existing_id"] == existing.pk


def test_api_status_pages_download_reprocess_delete(alice_api, alice, note):
    attachment = upload(alice, note, "text.pdf")
    services.attachment_ingest(attachment_id=attachment.pk)
    status = alice_api.get(f"/api/attachments/{attachment.pk}").json()
    assert status["status"] == "ready"
    assert status["progress_percent"] == 100
    assert status["page_count"] == 3
    listed = alice_api.get(f"/api/notes/{note.pk}/attachments").json()
    assert [a["id"] for a in listed] == [attachment.pk]

    pages = alice_api.get(f"/api/attachments/{attachment.pk}/pages").json()
    assert [p["number"] for p in pages] == [1, 2, 3]
    assert "grey heron waits" in pages[0]["text"]

    download = alice_api.get(f"/api/attachments/{attachment.pk}/file")
    assert download.status_code == 200
    assert download["Content-Disposition"].startswith("attachment;")

    again = alice_api.post(f"/api/attachments/{attachment.pk}/reprocess").json()
    assert again["status"] == "pending"
    refused = alice_api.post(f"/api/attachments/{attachment.pk}/reprocess")
    assert refused.status_code == 409

    assert alice_api.delete(f"/api/attachments/{attachment.pk}").status_code == 204
    assert not NoteAttachment.objects.exists()


def test_api_password_wrong_then_locked_then_right(alice_api, alice, note):
    data = sample("locked.pdf")
    attachment = upload(alice, note, "locked.pdf", data)
    url = f"/api/attachments/{attachment.pk}/password"
    for _ in range(3):
        wrong = alice_api.post(url, {"password": "nope"}, content_type="application/json")
        assert wrong.status_code == 422
    locked = alice_api.post(url, {"password": SAMPLE_PASSWORD}, content_type="application/json")
    assert locked.status_code == 409
    assert "Locked" in locked.json()["detail"]
    alice_api.post(f"/api/attachments/{attachment.pk}/reprocess")  # the user retries
    services.attachment_ingest(attachment_id=attachment.pk)  # still encrypted: asks again
    attachment.refresh_from_db()
    assert attachment.status == "needs_password"
    assert attachment.password_attempts == 0
    right = alice_api.post(url, {"password": SAMPLE_PASSWORD}, content_type="application/json")
    assert right.status_code == 200
    assert right.json()["status"] == "pending"


def test_note_page_lists_attachments_with_status(alice_client, alice, note):
    upload(alice, note, "text.pdf")
    page = alice_client.get(f"/notes/{note.pk}/").content.decode()
    assert "text.pdf" in page
    assert "data-dropzone" in page
    assert "Queued, waiting for a worker" in page


def test_note_page_without_attachments_shows_empty_state(alice_client, note):
    assert "No PDFs on this note yet." in alice_client.get(f"/notes/{note.pk}/").content.decode()


def test_row_polls_while_active_and_stops_when_ready(alice_client, alice, note):
    attachment = upload(alice, note, "text.pdf")
    row = alice_client.get(f"/attachments/{attachment.pk}/row/").content.decode()
    assert 'hx-trigger="every 1s"' in row
    services.attachment_ingest(attachment_id=attachment.pk)
    row = alice_client.get(f"/attachments/{attachment.pk}/row/").content.decode()
    assert "hx-trigger" not in row
    assert "Ready" in row
    assert "3 pages" in row


def test_row_shows_progress_text(alice_client, alice, note):
    attachment = upload(alice, note, "other.pdf")
    NoteAttachment.objects.filter(pk=attachment.pk).update(
        status="processing", stage="extracting", progress_current=12, progress_total=41
    )
    row = alice_client.get(f"/attachments/{attachment.pk}/row/").content.decode()
    assert "Extracting text (page 12 of 41)" in row
    assert 'value="29"' in row


def test_page_text_view_marks_ocr_pages(alice_client, alice, note):
    attachment = upload(alice, note, "scanned.pdf")
    services.attachment_ingest(attachment_id=attachment.pk)
    page = alice_client.get(f"/attachments/{attachment.pk}/pages/").content.decode()
    assert "Lighthouse Keeping Log" in page
    assert page.count('class="badge ocr-badge"') == 2
    assert f"/attachments/{attachment.pk}/file/#page=1" in page


def test_wrong_password_in_the_dialog_is_reported_in_the_row(alice_client, alice, note):
    data = sample("locked.pdf")
    attachment = upload(alice, note, "locked.pdf", data)
    row = alice_client.post(
        f"/attachments/{attachment.pk}/password/",
        {"password": "nope"},
        headers={"HX-Request": "true"},
    ).content.decode()
    assert "Wrong password. 2 attempts left." in row
    assert "data-show" in row  # the dialog opens again for another try


def test_delete_from_the_row(alice_client, alice, note):
    attachment = upload(alice, note, "text.pdf")
    response = alice_client.post(
        f"/attachments/{attachment.pk}/delete/", headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert response.content == b""
    assert not NoteAttachment.objects.exists()


def test_page_text_view_marks_a_cited_quote(alice_client, alice, note):
    from tests.fixtures.documents import ingest

    attachment = ingest(upload(alice, note, "text.pdf"))
    text = attachment.pages.get(number=3).text
    quote = " ".join(text.split()[5:15])  # spans line breaks in the page text
    url = f"/attachments/{attachment.pk}/pages/"
    page = alice_client.get(url, {"page": 3, "quote": quote}).content.decode()
    assert '<mark id="quote">' in page
    assert "The cited quote is marked below." in page
    missing = alice_client.get(url, {"page": 3, "quote": "<b>not on the page</b>"}).content
    assert b"The cited quote was not found on that page." in missing
    assert b"<b>not on the page</b>" not in missing
