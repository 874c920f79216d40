"""Requests over Django's size limits (DATA_UPLOAD_MAX_MEMORY_SIZE, DATA_UPLOAD_MAX_NUMBER_FIELDS,
DATA_UPLOAD_MAX_NUMBER_FILES) get the API's JSON error, 413, on both auth paths (token and
session), for JSON bodies, forms and multipart uploads; pages keep Django's own answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.test.client import encode_multipart

from attachments.models import NoteAttachment
from notes.models import Notebook
from tests.factories import NotebookFactory, NoteFactory

pytestmark = pytest.mark.django_db
BOUNDARY = "BoUnDaRy"


@pytest.fixture(autouse=True)
def _small_limits(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 5
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 2


@pytest.fixture(params=["token", "session"])
def api_client(request, alice, alice_token) -> tuple[Client, dict[str, str]]:
    """A script (bearer token, no cookies) or the browser (session cookie and CSRF token)."""
    if request.param == "token":
        return Client(), {"Authorization": f"Bearer {alice_token}"}
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get("/")  # sets the csrftoken cookie
    return client, {"X-CSRFToken": client.cookies["csrftoken"].value}


def assert_json_413(response, detail: str) -> None:
    assert response.status_code == 413, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == {"detail": detail}


def multipart(client: Client, url: str, headers: dict[str, str], data: dict[str, Any]):
    return client.post(
        url,
        encode_multipart(BOUNDARY, data),
        content_type=f"multipart/form-data; boundary={BOUNDARY}",
        headers=headers,
    )


def pdfs(count: int) -> list[SimpleUploadedFile]:
    return [
        SimpleUploadedFile(f"{i}.pdf", b"%PDF-1.4 tiny", "application/pdf") for i in range(count)
    ]


def test_a_json_body_over_the_limit(api_client):
    client, headers = api_client
    response = client.post(
        "/api/notebooks",
        json.dumps({"title": "Big", "description": "x" * 3000}),
        content_type="application/json",
        headers=headers,
    )
    assert_json_413(
        response, "The request body is too large: at most 2,000 bytes, besides uploaded files."
    )
    assert not Notebook.objects.exists()


def test_a_json_body_within_the_limit_still_works(api_client):
    client, headers = api_client
    response = client.post(
        "/api/notebooks",
        json.dumps({"title": "Small", "description": "x" * 1000}),
        content_type="application/json",
        headers=headers,
    )
    assert response.status_code == 201


def test_a_patch_over_the_limit(api_client, alice):
    client, headers = api_client
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), author=alice)
    response = client.patch(
        f"/api/notes/{note.pk}",
        json.dumps({"body": "x" * 3000}),
        content_type="application/json",
        headers=headers,
    )
    assert_json_413(
        response, "The request body is too large: at most 2,000 bytes, besides uploaded files."
    )


def test_too_many_files_in_one_upload(api_client, alice):
    client, headers = api_client
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), author=alice)
    response = multipart(client, f"/api/notes/{note.pk}/attachments", headers, {"files": pdfs(3)})
    assert_json_413(response, "Too many files in one request: at most 2.")
    assert not NoteAttachment.objects.exists()


def test_too_many_fields_in_an_upload(api_client, alice):
    client, headers = api_client
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), author=alice)
    fields = {f"f{i}": "x" for i in range(6)}
    response = multipart(
        client, f"/api/notes/{note.pk}/attachments", headers, {**fields, "files": pdfs(1)}
    )
    assert_json_413(response, "Too many fields in one request: at most 5.")
    assert not NoteAttachment.objects.exists()


def test_form_fields_over_the_size_limit_in_an_upload(api_client, alice):
    client, headers = api_client
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), author=alice)
    response = multipart(
        client,
        f"/api/notes/{note.pk}/attachments",
        headers,
        {"comment": "x" * 3000, "files": pdfs(1)},
    )
    assert_json_413(
        response, "The request body is too large: at most 2,000 bytes, besides uploaded files."
    )
    assert not NoteAttachment.objects.exists()


def test_a_form_with_too_many_fields(api_client):
    client, headers = api_client
    response = client.post(
        "/api/notebooks",
        "&".join(f"f{i}=x" for i in range(6)),
        content_type="application/x-www-form-urlencoded",
        headers=headers,
    )
    if headers.get("Authorization"):
        # A script's body is only read as JSON, which this is not.
        assert response.status_code in {400, 422}
        assert "detail" in response.json()
    else:
        # The session's CSRF check reads the form first.
        assert_json_413(response, "Too many fields in one request: at most 5.")
    assert not Notebook.objects.exists()


def test_pages_keep_djangos_answer(alice_client, alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), author=alice)
    response = alice_client.post(
        f"/notes/{note.pk}/preview/", {"body": "x" * 3000}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 400
    assert not response["Content-Type"].startswith("application/json")
