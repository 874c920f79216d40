from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client

from accounts.services import api_token_create
from tests.factories import NotebookFactory, NoteFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_logged_in() -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="root", is_staff=True, is_superuser=True))
    return client


def test_every_model_is_registered_with_list_display_and_search():
    from accounts.models import ApiToken
    from notes.models import Note, Notebook

    for model in (Notebook, Note, ApiToken):
        model_admin = admin.site._registry[model]
        assert len(model_admin.list_display) > 1
        assert model_admin.search_fields


@pytest.mark.parametrize(
    "url",
    [
        "/admin/notes/notebook/?q=Reading",
        "/admin/notes/note/?trashed=yes",
        "/admin/notes/note/?q=hello",
        "/admin/accounts/apitoken/?q=script",
    ],
)
def test_admin_changelists_load_with_search_and_filters(url, admin_client_logged_in, alice):
    notebook = NotebookFactory.create(owner=alice, title="Reading")
    note = NoteFactory.create(notebook=notebook, body="hello")
    api_token_create(user=alice, name="script")
    assert admin_client_logged_in.get(url).status_code == 200
    assert (
        admin_client_logged_in.get(f"/admin/notes/notebook/{notebook.pk}/change/").status_code
        == 200
    )
    assert admin_client_logged_in.get(f"/admin/notes/note/{note.pk}/change/").status_code == 200


def test_admin_is_closed_to_regular_users(alice_client):
    response = alice_client.get("/admin/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]
