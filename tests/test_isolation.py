"""Alice can never see or change Bob's notebooks and notes, whatever page or API route she uses.

Both tests enumerate the routes they cover and fail when a route exists that they do not know,
so a new page or endpoint cannot ship without an isolation check.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, get_resolver

from notebook.api import api
from notes.models import Note, Notebook
from tests.conftest import EVAL_PDFS

pytestmark = pytest.mark.django_db

# Pages that take a notebook or note id, with the methods they accept.
OBJECT_PAGES = {
    "notes:notebook_detail": ("notebook", ["GET"]),
    "notes:notebook_rename": ("notebook", ["GET", "POST"]),
    "notes:notebook_delete": ("notebook", ["GET", "POST"]),
    "notes:note_create": ("notebook", ["POST"]),
    "notes:note_detail": ("note", ["GET"]),
    "notes:note_edit": ("note", ["GET", "POST"]),
    "notes:note_preview": ("note", ["POST"]),
    "notes:note_trash": ("note", ["POST"]),
    "notes:note_restore": ("note", ["POST"]),
    "notes:note_delete": ("note", ["GET", "POST"]),
    "accounts:token_revoke": ("token", ["POST"]),
    "attachments:upload": ("note", ["POST"]),
    "attachments:row": ("attachment", ["GET"]),
    "attachments:download": ("attachment", ["GET"]),
    "attachments:pages": ("attachment", ["GET"]),
    "attachments:reprocess": ("attachment", ["POST"]),
    "attachments:delete": ("attachment", ["GET", "POST"]),
    "attachments:password": ("attachment", ["POST"]),
    "attachments:unlock": ("attachment", ["POST"]),
    "attachments:notebook_search": ("notebook", ["GET"]),
    "chat:notebook_conversations": ("notebook", ["GET", "POST"]),
    "chat:note_conversations": ("note", ["GET", "POST"]),
    "chat:conversation": ("conversation", ["GET"]),
    "chat:ask": ("conversation", ["POST"]),
    "chat:rename": ("conversation", ["GET", "POST"]),
    "chat:delete": ("conversation", ["GET", "POST"]),
    "chat:message": ("message", ["GET"]),
    "chat:retry": ("message", ["POST"]),
}
# Pages without an object id: they must still require a login.
PLAIN_PAGES = {
    "notes:notebook_list": "/",
    "accounts:settings": "/settings/",
    "accounts:password_change": "/settings/password/",
    "accounts:password_change_done": "/settings/password/done/",
    "attachments:search": "/search/",
}
PUBLIC_PAGES = {"login", "logout", "signup"}


def _app_patterns() -> dict[str, URLPattern]:
    found: dict[str, URLPattern] = {}

    def walk(patterns, namespace: str | None) -> None:
        for p in patterns:
            if isinstance(p, URLPattern):
                if p.name:
                    found[f"{namespace}:{p.name}" if namespace else p.name] = p
            elif p.namespace in ("admin", "api"):
                continue  # admin is staff-only by Django; the API has its own test below
            else:
                walk(p.url_patterns, p.namespace or namespace)

    walk(get_resolver().url_patterns, None)
    return found


def test_every_page_is_covered_by_this_test():
    known = set(OBJECT_PAGES) | set(PLAIN_PAGES) | PUBLIC_PAGES
    assert set(_app_patterns()) - known == set()


@pytest.fixture
def bobs_objects(bob, bob_notebook, bob_note, bob_attachment):
    from accounts.services import api_token_create
    from chat.models import Conversation, Message

    token, _ = api_token_create(user=bob, name="bob's script")
    conversation = Conversation.objects.create(
        owner=bob, notebook=bob_notebook, note=bob_note, title="Bob's chat"
    )
    Message.objects.create(conversation=conversation, role="user", content="bob's question")
    answer = Message.objects.create(
        conversation=conversation, role="assistant", content="bob's answer", status="error"
    )
    return {
        "notebook": bob_notebook.pk,
        "note": bob_note.pk,
        "token": token.pk,
        "attachment": bob_attachment.pk,
        "conversation": conversation.pk,
        "message": answer.pk,
    }


def _bobs_data_untouched(ids: dict[str, int]) -> None:
    from attachments.models import NoteAttachment
    from chat.models import Conversation, Message

    conversation = Conversation.objects.get(pk=ids["conversation"])
    assert conversation.title == "Bob's chat"
    assert list(conversation.messages.values_list("content", "status")) == [
        ("bob's question", "complete"),
        ("bob's answer", "error"),  # not retried
    ]
    assert Message.objects.count() == 2  # nothing asked in his conversation
    assert Conversation.objects.count() == 1  # none started on his notebook or note

    attachment = NoteAttachment.objects.get(pk=ids["attachment"])
    assert attachment.status == "needs_password"  # not reprocessed, unlocked or deleted
    assert attachment.password_attempts == 0
    assert NoteAttachment.objects.filter(note_id=ids["note"]).count() == 1


def _url_for(name: str, object_id: int) -> str:
    from django.urls import reverse

    pattern = _app_patterns()[name]
    (kwarg,) = pattern.pattern.converters
    return reverse(name, kwargs={kwarg: object_id})


@pytest.mark.parametrize("name", sorted(OBJECT_PAGES))
def test_pages_answer_404_for_another_users_objects(name, alice_client, bobs_objects, bob_note):
    kind, methods = OBJECT_PAGES[name]
    url = _url_for(name, bobs_objects[kind])
    for method in methods:
        data = {"title": "pwned", "body": "pwned", "description": "pwned", "password": "x",
                "content": "pwned?"}  # fmt: skip
        if name == "attachments:upload":
            data["files"] = _pdf_upload()
        response = getattr(alice_client, method.lower())(url, data)
        assert response.status_code == 404, f"{method} {url} answered {response.status_code}"
    _bobs_data_untouched(bobs_objects)
    bob_note.refresh_from_db()
    assert bob_note.title == "Bob's note"
    assert not bob_note.is_trashed
    assert Notebook.objects.filter(pk=bobs_objects["notebook"], title="Bob's secrets").exists()
    assert Note.objects.filter(notebook_id=bobs_objects["notebook"]).count() == 1


@pytest.mark.parametrize("name", sorted(OBJECT_PAGES))
def test_pages_redirect_anonymous_users_to_login(name, anon_client, bobs_objects):
    kind, methods = OBJECT_PAGES[name]
    url = _url_for(name, bobs_objects[kind])
    for method in methods:
        response = getattr(anon_client, method.lower())(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize("url", sorted(PLAIN_PAGES.values()))
def test_plain_pages_redirect_anonymous_users_to_login(url, anon_client):
    response = anon_client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_lists_never_show_another_users_objects(alice_client, bobs_objects):
    page = alice_client.get("/").content.decode()
    assert "Bob's secrets" not in page


# --- API --------------------------------------------------------------------------------------


def _api_operations() -> list[tuple[str, str]]:
    schema = api.get_openapi_schema()
    return [
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method in operations
    ]


def _pdf_upload():
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile("mine.pdf", (EVAL_PDFS / "url.pdf").read_bytes(), "application/pdf")


API_WITH_IDS = {
    ("POST", "/api/notes/{note_id}/attachments"),
    ("GET", "/api/notes/{note_id}/attachments"),
    ("GET", "/api/attachments/{attachment_id}"),
    ("GET", "/api/attachments/{attachment_id}/file"),
    ("GET", "/api/attachments/{attachment_id}/pages"),
    ("POST", "/api/attachments/{attachment_id}/password"),
    ("POST", "/api/attachments/{attachment_id}/reprocess"),
    ("DELETE", "/api/attachments/{attachment_id}"),
    ("GET", "/api/notebooks/{notebook_id}"),
    ("PATCH", "/api/notebooks/{notebook_id}"),
    ("DELETE", "/api/notebooks/{notebook_id}"),
    ("GET", "/api/notebooks/{notebook_id}/notes"),
    ("POST", "/api/notebooks/{notebook_id}/notes"),
    ("GET", "/api/notes/{note_id}"),
    ("PATCH", "/api/notes/{note_id}"),
    ("DELETE", "/api/notes/{note_id}"),
    ("POST", "/api/notes/{note_id}/trash"),
    ("POST", "/api/notes/{note_id}/restore"),
    ("GET", "/api/conversations/{conversation_id}"),
    ("PATCH", "/api/conversations/{conversation_id}"),
    ("DELETE", "/api/conversations/{conversation_id}"),
    ("GET", "/api/conversations/{conversation_id}/messages"),
    ("POST", "/api/conversations/{conversation_id}/messages"),
    ("POST", "/api/messages/{message_id}/retry"),
}
# Search takes ids as filters, not in its path; tests/attachments/test_search.py covers them.
API_WITHOUT_IDS = {
    ("GET", "/api/me"),
    ("GET", "/api/notebooks"),
    ("POST", "/api/notebooks"),
    ("GET", "/api/search"),
    ("POST", "/api/search"),
    ("GET", "/api/conversations"),
    ("POST", "/api/conversations"),
}


def test_every_api_operation_is_covered_by_this_test():
    assert set(_api_operations()) == API_WITH_IDS | API_WITHOUT_IDS


def _fill(path: str, ids: dict[str, int]) -> str:
    return re.sub(r"\{(\w+)_id\}", lambda m: str(ids[m.group(1)]), path)


@pytest.mark.parametrize(("method", "path"), sorted(API_WITH_IDS))
def test_api_answers_404_for_another_users_objects(method, path, alice_api, bobs_objects):
    url = _fill(path, bobs_objects)
    if path.endswith("/attachments") and method == "POST":
        response = alice_api.post(url, {"files": [_pdf_upload()]})
    else:
        body = '{"title": "pwned", "body": "pwned", "password": "x", "content": "pwned?"}'
        response = alice_api.generic(method, url, body, content_type="application/json")
    assert response.status_code == 404, f"{method} {url} answered {response.status_code}"
    _bobs_data_untouched(bobs_objects)
    assert Note.objects.filter(pk=bobs_objects["note"], title="Bob's note").exists()
    assert Notebook.objects.filter(pk=bobs_objects["notebook"], title="Bob's secrets").exists()


@pytest.mark.parametrize(("method", "path"), sorted(API_WITH_IDS | API_WITHOUT_IDS))
def test_api_answers_401_to_anonymous_and_bad_tokens(method, path, bobs_objects):
    url = _fill(path, bobs_objects)
    for client in (Client(), Client(headers={"Authorization": "Bearer nbk_not-a-real-token"})):
        response = client.generic(method, url, "{}", content_type="application/json")
        assert response.status_code == 401, f"{method} {url} answered {response.status_code}"


def test_api_lists_never_show_another_users_objects(alice_api, bobs_objects):
    assert alice_api.get("/api/notebooks").json()["count"] == 0


def test_background_requests_of_a_logged_out_browser_get_401_and_a_login_redirect(
    anon_client, bobs_objects
):
    url = f"/attachments/{bobs_objects['attachment']}/row/"
    response = anon_client.get(
        url, headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/notes/5/?x=1"}
    )
    assert response.status_code == 401
    assert response["HX-Redirect"] == "/accounts/login/?next=/notes/5/%3Fx%3D1"
    upload = anon_client.post(
        f"/notes/{bobs_objects['note']}/attachments/", headers={"X-Upload": "1"}
    )
    assert upload.status_code == 401
