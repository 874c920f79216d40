"""Concurrent uploads of one user stay within the quota; a stored PDF always downloads as .pdf."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import pikepdf
import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.db.models import Sum

from attachments.models import NoteAttachment
from attachments.services import attachment_upload
from attachments.validation import MB, download_name
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import sample, upload

UPLOADS = 5


def padded_pdf(size: int) -> bytes:
    """A real one-page PDF of about `size` bytes, unique: random bytes in an unused stream."""
    pdf = pikepdf.new()
    pdf.add_blank_page()
    pdf.Root.Padding = pdf.make_stream(os.urandom(size))
    out = io.BytesIO()
    pdf.save(out, compress_streams=False)
    return out.getvalue()


def stored_files() -> list[Path]:
    return [p for p in Path(settings.MEDIA_ROOT).rglob("*") if p.is_file()]


@pytest.mark.django_db(transaction=True)  # each thread commits on its own connection
def test_concurrent_uploads_cannot_exceed_the_quota(alice, settings):
    settings.USER_QUOTA_MB = 1
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    files = [padded_pdf(300 * 1024) for _ in range(UPLOADS)]  # 3 fit in 1 MB, 4 do not
    assert all(300 * 1024 < len(data) < 340 * 1024 for data in files)
    barrier = threading.Barrier(UPLOADS)
    refused: list[ValidationError] = []
    failed: list[BaseException] = []

    def go(i: int) -> None:
        try:
            uploaded = SimpleUploadedFile(f"part {i}.pdf", files[i], "application/pdf")
            barrier.wait(timeout=30)
            attachment_upload(user=alice, note=note, uploaded=uploaded)
        except ValidationError as exc:
            refused.append(exc)
        except BaseException as exc:  # reported by the main thread
            failed.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=go, args=(i,)) for i in range(UPLOADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failed, failed
    assert [exc.code for exc in refused] == ["quota"] * len(refused)
    assert all("does not fit in your storage" in exc.messages[0] for exc in refused)
    stored = NoteAttachment.objects.filter(uploaded_by=alice)
    total = stored.aggregate(total=Sum("size"))["total"]
    assert total <= settings.USER_QUOTA_MB * MB
    assert (stored.count(), len(refused)) == (3, 2)
    # Nothing of a refused upload is left behind: exactly the stored rows' files remain.
    assert sorted(stored_files()) == sorted(Path(a.file.path) for a in stored)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("report1.html", "report1.html.pdf"),
        ("notes.PDF", "notes.PDF"),
        ("paper.pdf", "paper.pdf"),
        ("v1.2 final", "v1.2 final.pdf"),
        ("scan.pdf.exe", "scan.pdf.exe.pdf"),
    ],
)
def test_download_name_always_ends_in_pdf(name, expected):
    assert download_name(name) == expected


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["report1.html", "page.svg", "Grüße.htm"])
def test_a_pdf_stored_under_another_extension_downloads_as_pdf(
    alice, alice_client, alice_api, name
):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    attachment = upload(alice, note, name, sample("text.pdf"))
    assert attachment.original_name == name  # shown as the user named it
    responses = {
        "page, download": alice_client.get(f"/attachments/{attachment.pk}/file/?download=1"),
        "page, inline": alice_client.get(f"/attachments/{attachment.pk}/file/"),
        "API": alice_api.get(f"/api/attachments/{attachment.pk}/file"),
    }
    for where, response in responses.items():
        assert response.status_code == 200, where
        disposition = response["Content-Disposition"]
        expected = (
            f'filename="{name}.pdf"'
            if name.isascii()
            else "filename*=utf-8''Gr%C3%BC%C3%9Fe.htm.pdf"
        )
        assert disposition.endswith(expected), (where, disposition)
        assert response["Content-Type"] == "application/pdf"
        response.close()
