"""Uploads: what is refused (and that nothing is stored then), duplicates, downloads."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from attachments.models import NoteAttachment
from attachments.validation import clean_filename
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import sample, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def note(alice):
    return NoteFactory.create(notebook=NotebookFactory.create(owner=alice))


def _stored_files() -> list[Path]:
    return [p for p in Path(settings.MEDIA_ROOT).rglob("*") if p.is_file()]


def _post(client, note, name: str, data: bytes, **headers):
    return client.post(
        f"/notes/{note.pk}/attachments/",
        {"files": [SimpleUploadedFile(name, data, "application/pdf")]},
        headers={"X-Upload": "1", **headers},
    )


def test_upload_stores_the_file_under_note_and_uuid(alice_client, alice, note):
    response = _post(alice_client, note, "R data.pdf", sample("other.pdf"))
    assert response.status_code == 201
    attachment = NoteAttachment.objects.get()
    assert attachment.status == "pending"
    assert attachment.original_name == "R data.pdf"
    assert attachment.page_count == 2
    assert attachment.file.name == f"attachments/{note.pk}/{attachment.uuid}.pdf"
    assert _stored_files() == [Path(attachment.file.path)]
    assert f'id="attachment-{attachment.pk}"' in response.content.decode()
    assert 'hx-trigger="every 1s"' in response.content.decode()  # the row polls itself


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("evil.pdf", b"<html><script>alert(1)</script></html>", "is not a PDF"),
        ("empty.pdf", b"", "is empty"),
        ("junk.pdf", b"%PDF-1.7\n" + b"garbage " * 500, "contains no PDF objects"),
    ],
)
def test_fake_pdfs_are_refused_and_nothing_is_stored(alice_client, note, name, data, message):
    response = _post(alice_client, note, name, data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not NoteAttachment.objects.exists()
    assert _stored_files() == []


def test_oversized_upload_is_refused(alice_client, note, settings):
    settings.MAX_UPLOAD_MB = 1
    data = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n" + b"0" * (1024 * 1024 + 10)
    response = _post(alice_client, note, "big.pdf", data)
    assert response.status_code == 400
    assert "the limit is 1 MB" in response.content.decode()
    assert _stored_files() == []


def test_too_many_pages_is_refused(alice_client, note, settings):
    settings.MAX_PDF_PAGES = 2
    response = _post(alice_client, note, "text.pdf", sample("text.pdf"))
    assert response.status_code == 400
    assert "has 3 pages; the limit is 2" in response.content.decode()
    assert _stored_files() == []


def test_quota_is_enforced_per_user(alice_client, alice, note, settings):
    upload(alice, note, "text.pdf")
    settings.USER_QUOTA_MB = 0.004  # text.pdf is 3 KB, other.pdf 2 KB
    response = _post(alice_client, note, "other.pdf", sample("other.pdf"))
    assert response.status_code == 400
    assert "does not fit in your storage" in response.content.decode()
    assert NoteAttachment.objects.count() == 1


def test_duplicate_points_to_the_existing_attachment(alice_client, alice, note):
    first = upload(alice, note, "text.pdf")
    response = _post(alice_client, note, "copy of text.pdf", sample("text.pdf"))
    assert response.status_code == 409
    body = response.content.decode()
    assert "“text.pdf” is already attached to this note" in body
    assert f'href="#attachment-{first.pk}"' in body
    assert NoteAttachment.objects.count() == 1
    assert len(_stored_files()) == 1


def test_same_file_on_another_note_is_fine(alice, note):
    other = NoteFactory.create(notebook=note.notebook)
    upload(alice, note, "text.pdf")
    upload(alice, other, "text.pdf")
    assert NoteAttachment.objects.count() == 2


def test_encrypted_pdf_waits_for_a_password(alice, note):
    attachment = upload(alice, note, "locked.pdf")
    assert attachment.status == "needs_password"


def test_several_files_without_js_redirect_with_messages(alice_client, note):
    response = alice_client.post(
        f"/notes/{note.pk}/attachments/",
        {
            "files": [
                SimpleUploadedFile("text.pdf", sample("text.pdf")),
                SimpleUploadedFile("fake.pdf", b"not a pdf at all"),
            ]
        },
        follow=True,
    )
    page = response.content.decode()
    assert "Uploaded “text.pdf”" in page
    assert "“fake.pdf” is not a PDF" in page
    assert NoteAttachment.objects.count() == 1


def test_uploading_to_a_trashed_note_is_refused(alice, note):
    from django.core.exceptions import ValidationError

    from notes.services import note_trash

    note_trash(note=note)
    with pytest.raises(ValidationError):
        upload(alice, note, "text.pdf")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("../../etc/passwd.pdf", "passwd.pdf"),
        ("C:\\Users\\me\\report.pdf", "report.pdf"),
        ('evil"\r\nSet-Cookie: x=1.pdf', 'evil"Set-Cookie: x=1.pdf'),
        ("Grüße 人工智能.pdf", "Grüße 人工智能.pdf"),
        ("", "document.pdf"),
        ("...", "document.pdf"),
    ],
)
def test_clean_filename(raw, expected):
    assert clean_filename(raw) == expected


@pytest.mark.parametrize(
    "name",
    ["../../etc/passwd.pdf", 'quote"s and\r\nCRLF.pdf', "Grüße 人工智能 “curly”.pdf"],
)
def test_download_header_is_safe_for_hostile_names(alice_client, alice, note, name):
    attachment = upload(alice, note, name, sample("text.pdf"))
    response = alice_client.get(f"/attachments/{attachment.pk}/file/")
    assert response.status_code == 200
    disposition = response["Content-Disposition"]
    assert "\r" not in disposition
    assert "\n" not in disposition
    assert "/" not in disposition.replace("filename*=utf-8''", "")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Type"] == "application/pdf"
    assert b"".join(response.streaming_content).startswith(b"%PDF-")
    if "filename*=" in disposition:
        assert unquote(disposition.split("filename*=utf-8''")[1]) == clean_filename(name)
    else:
        assert clean_filename(name).replace('"', '\\"') in disposition
