from __future__ import annotations

import pytest

from notes.models import Note, Notebook
from tests.factories import NotebookFactory, NoteFactory

pytestmark = pytest.mark.django_db


def test_notebook_crud_with_a_token(alice_api, alice):
    created = alice_api.post(
        "/api/notebooks", {"title": "API book"}, content_type="application/json"
    )
    assert created.status_code == 201, created.content
    notebook_id = created.json()["id"]
    assert created.json()["note_count"] == 0

    listed = alice_api.get("/api/notebooks").json()
    assert listed["count"] == 1
    assert listed["items"][0]["title"] == "API book"

    patched = alice_api.patch(
        f"/api/notebooks/{notebook_id}", {"title": "Renamed"}, content_type="application/json"
    )
    assert patched.json()["title"] == "Renamed"
    assert alice_api.get(f"/api/notebooks/{notebook_id}").json()["title"] == "Renamed"

    assert alice_api.delete(f"/api/notebooks/{notebook_id}").status_code == 204
    assert not Notebook.objects.exists()


def test_note_lifecycle_with_a_token(alice_api, alice):
    notebook = NotebookFactory.create(owner=alice)
    created = alice_api.post(
        f"/api/notebooks/{notebook.pk}/notes",
        {"title": "From a script", "body": "# hi"},
        content_type="application/json",
    )
    assert created.status_code == 201
    note_id = created.json()["id"]
    assert Note.objects.get(pk=note_id).author == alice

    updated = alice_api.patch(
        f"/api/notes/{note_id}", {"body": "changed"}, content_type="application/json"
    )
    assert updated.json()["body"] == "changed"
    assert updated.json()["title"] == "From a script"

    refused = alice_api.delete(f"/api/notes/{note_id}")
    assert refused.status_code == 409
    assert "trash" in refused.json()["detail"]

    trashed = alice_api.post(f"/api/notes/{note_id}/trash")
    assert trashed.json()["trashed_at"] is not None
    assert alice_api.get(f"/api/notebooks/{notebook.pk}/notes").json()["count"] == 0
    in_trash = alice_api.get(f"/api/notebooks/{notebook.pk}/notes?trashed=true").json()
    assert [n["id"] for n in in_trash["items"]] == [note_id]

    restored = alice_api.post(f"/api/notes/{note_id}/restore")
    assert restored.json()["trashed_at"] is None

    alice_api.post(f"/api/notes/{note_id}/trash")
    assert alice_api.delete(f"/api/notes/{note_id}").status_code == 204
    assert alice_api.get(f"/api/notes/{note_id}").status_code == 404


def test_validation_errors_are_readable(alice_api):
    response = alice_api.post("/api/notebooks", {"title": "  "}, content_type="application/json")
    assert response.status_code == 422
    assert response.json()["detail"] == "Give it a title."
    assert not Notebook.objects.exists()


def test_malformed_json_is_refused(alice_api):
    response = alice_api.post("/api/notebooks", "{not json", content_type="application/json")
    assert response.status_code in (400, 422)
    assert not Notebook.objects.exists()


def test_session_auth_needs_csrf_for_writes(alice):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.get("/api/notebooks").status_code == 200
    refused = client.post("/api/notebooks", {"title": "x"}, content_type="application/json")
    assert refused.status_code == 403
    client.get("/")  # sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    accepted = client.post(
        "/api/notebooks",
        {"title": "x"},
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert accepted.status_code == 201


def test_pagination_limits_results(alice_api, alice):
    notebook = NotebookFactory.create(owner=alice)
    NoteFactory.create_batch(5, notebook=notebook)
    page = alice_api.get(f"/api/notebooks/{notebook.pk}/notes?limit=2&offset=2").json()
    assert page["count"] == 5
    assert len(page["items"]) == 2


def test_openapi_docs_are_served(alice_client):
    assert alice_client.get("/api/docs").status_code == 200
    schema = alice_client.get("/api/openapi.json").json()
    assert "/api/notebooks" in schema["paths"]
