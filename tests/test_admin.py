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
    from attachments.models import DocumentChunk, DocumentPage, NoteAttachment
    from intelligence.models import SourceProfile
    from notes.models import Note, Notebook

    models = (Notebook, Note, ApiToken, NoteAttachment, DocumentPage, DocumentChunk, SourceProfile)
    for model in models:
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


def test_attachment_admin_lists_filters_and_reprocesses(admin_client_logged_in, alice):
    from attachments import services
    from attachments.models import NoteAttachment
    from tests.fixtures.documents import upload

    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    attachment = upload(alice, note, "text.pdf")
    services.attachment_ingest(attachment_id=attachment.pk)
    client = admin_client_logged_in
    for url in (
        "/admin/attachments/noteattachment/?status__exact=ready",
        "/admin/attachments/noteattachment/?q=text",
        f"/admin/attachments/noteattachment/{attachment.pk}/change/",
        "/admin/attachments/documentpage/?is_ocr__exact=0",
        "/admin/attachments/documentchunk/?q=kingfisher",
    ):
        assert client.get(url).status_code == 200, url
    chunk = attachment.chunks.first()
    page = client.get(f"/admin/attachments/documentchunk/{chunk.pk}/change/").content.decode()
    assert 'name="content"' not in page  # read-only: shown, not editable
    response = client.post(
        "/admin/attachments/noteattachment/",
        {"action": "reprocess", "_selected_action": [attachment.pk]},
        follow=True,
    )
    assert "Queued 1 attachment(s)" in response.content.decode()
    assert NoteAttachment.objects.get(pk=attachment.pk).status == "pending"
