"""Alice can never see or change Bob's notebooks and notes, whatever page, API route, WebSocket
or agent tool she uses, with whatever HTTP verb.

Each family of tests enumerates what it covers (URL patterns and the methods their views
accept, the API's OpenAPI operations and the id parameters they take, the WebSocket routes,
the agent tools and their id arguments) and fails when something exists that it does not know,
so a new page, endpoint, socket or tool cannot ship without an isolation check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from intelligence.models import SourceProfile
from notebook.api import api
from notebook.asgi import application
from notebook.routing import websocket_urlpatterns
from notes.models import Note, Notebook
from tests.fixtures.documents import sample
from tests.routes import VERBS, accepted_methods, api_operations, app_patterns

pytestmark = pytest.mark.django_db

# Pages that take a notebook or note id, with the methods they accept.
OBJECT_PAGES = {
    "workspace:page": ("notebook", ["GET"]),
    "workspace:ask": ("notebook", ["POST"]),
    "workspace:sources_state": ("notebook", ["GET"]),
    "chat:ask_pdf": ("attachment", ["POST"]),
    "notes:notebook_notes": ("notebook", ["GET"]),
    "attachments:notebook_upload": ("notebook", ["POST"]),
    "attachments:notebook_link": ("notebook", ["POST"]),
    "attachments:source": ("attachment", ["GET"]),
    "chat:save": ("message", ["POST"]),
    "chat:save_form": ("message", ["GET"]),
    "notes:notebook_rename": ("notebook", ["GET", "POST"]),
    "notes:notebook_delete": ("notebook", ["GET", "POST"]),
    "notes:notebook_share": ("notebook", ["GET", "POST"]),
    "notes:member_update": ("member", ["POST"]),
    "notes:member_remove": ("member", ["POST"]),
    "notes:notebook_transfer": ("member", ["POST"]),
    "notes:notebook_leave": ("notebook", ["POST"]),
    "notes:note_create": ("notebook", ["POST"]),
    "attachments:note_detail": ("note", ["GET"]),
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
    "attachments:thumbnail": ("attachment", ["GET"]),
    "attachments:reprocess": ("attachment", ["POST"]),
    "attachments:delete": ("attachment", ["GET", "POST"]),
    "attachments:password": ("attachment", ["POST"]),
    "attachments:unlock": ("attachment", ["POST"]),
    "search:notebook_search": ("notebook", ["GET"]),
    "chat:notebook_conversations": ("notebook", ["GET", "POST"]),
    "chat:note_conversations": ("note", ["GET", "POST"]),
    "chat:conversation": ("conversation", ["GET"]),
    "chat:ask": ("conversation", ["POST"]),
    "chat:rename": ("conversation", ["GET", "POST"]),
    "chat:compact": ("conversation", ["POST"]),
    "chat:delete": ("conversation", ["GET", "POST"]),
    "chat:message": ("message", ["GET"]),
    "chat:retry": ("message", ["POST"]),
    "chat:memories": ("notebook", ["GET"]),
    "chat:memories_forget": ("notebook", ["GET", "POST"]),
    "chat:memory_delete": ("memory", ["POST"]),
    "guides:source_guide": ("attachment", ["GET"]),
    "guides:notebook_guide": ("notebook", ["GET"]),
    "intelligence:source": ("attachment", ["GET"]),
    "intelligence:edit": ("attachment", ["POST"]),
    "intelligence:name": ("attachment", ["POST"]),
    "exports:notebook": ("notebook", ["GET"]),
    "exports:conversation": ("conversation", ["GET"]),
    "exports:studio_markdown": ("output", ["GET"]),
    "exports:studio_csv": ("output", ["GET"]),
    "exports:studio_pdf": ("output", ["GET"]),
    "studio:notebook": ("notebook", ["GET", "POST"]),
    "studio:output": ("output", ["GET"]),
    "studio:status": ("output", ["GET"]),
    "studio:regenerate": ("output", ["POST"]),
    "studio:cancel": ("output", ["POST"]),
    "studio:rename": ("output", ["POST"]),
    "studio:delete": ("output", ["GET", "POST"]),
    "studio:audio": ("output", ["GET"]),
}
# Pages without an object id: they must still require a login.
PLAIN_PAGES = {
    "notes:notebook_list": "/",
    "accounts:settings": "/settings/",
    "accounts:password_change": "/settings/password/",
    "accounts:password_change_done": "/settings/password/done/",
    "search:search": "/search/",
    "chat:mentions": "/chats/mentions/",
    "exports:user": "/settings/export/",
    "exports:account_delete": "/settings/delete/",
}
# Pages naming objects in their query string: another user's object answers 404.
QUERY_ID_PAGES = {
    "chat:mentions": [
        {"notebook": "notebook", "q": "", "all": "1"},
        {"notebook": "notebook", "q": "bob", "all": "0"},
    ],
}
PUBLIC_PAGES = {"login", "logout", "signup", "set_language", "javascript-catalog",
                # Forgot your password (the link in the mail carries its own token) and
                # single sign-on (404 unless OIDC_ISSUER is set): before any login.
                "password_reset", "password_reset_done", "password_reset_confirm",
                "password_reset_complete", "oidc_start", "oidc_callback"}  # fmt: skip
# Pages for staff (and the metrics token) only: everyone else gets 404, with any verb.
STAFF_PAGES = {"metrics": "/metrics"}


def test_every_page_is_covered_by_this_test():
    known = set(OBJECT_PAGES) | set(PLAIN_PAGES) | PUBLIC_PAGES | set(STAFF_PAGES)
    assert set(app_patterns()) - known == set()


def test_the_methods_listed_here_are_those_the_views_accept():
    patterns = app_patterns()
    listed = {name: set(methods) for name, (_, methods) in OBJECT_PAGES.items()}
    assert listed == {name: accepted_methods(patterns[name]) for name in OBJECT_PAGES}


@pytest.fixture
def bobs_objects(bob, bob_notebook, bob_note, bob_attachment):
    from accounts.services import api_token_create
    from chat.models import Conversation, Memory, Message
    from notes.services import membership_add
    from tests.factories import UserFactory

    # Bob shares his notebook with Carol, not with Alice: nothing of it reaches Alice.
    carol = UserFactory.create(username="carol")
    membership_add(notebook=bob_notebook, by=bob, identifier="carol", role="viewer")
    token, _ = api_token_create(user=bob, name="bob's script")
    conversation = Conversation.objects.create(
        owner=bob, notebook=bob_notebook, note=bob_note, title="Bob's chat"
    )
    Message.objects.create(conversation=conversation, role="user", content="bob's question")
    answer = Message.objects.create(
        conversation=conversation, role="assistant", content="bob's answer", status="error"
    )
    # A summary of his older messages (chat.compaction), readable through its own routes.
    conversation.summaries.create(
        text="Bob's summary", first_message=answer, last_message=answer, message_count=1,
        summarizer="extractive",
    )  # fmt: skip
    memory = Memory.objects.create(
        owner=bob, notebook=bob_notebook, kind="fact", text="bob's memory", importance=0.9
    )
    # His source's profile (intelligence): its extracted data never reaches Alice.
    SourceProfile.objects.create(
        attachment=bob_attachment, doc_type="receipt", better_name="Bob's receipt",
        extracted={"merchant": "Bob's shop"}, status="ready",
    )  # fmt: skip
    # A Studio output of his notebook (flashcards, so that its CSV exists too).
    from studio.models import StudioOutput

    output = StudioOutput.objects.create(
        notebook=bob_notebook, created_by=bob, kind="flashcards", title="Bob's cards",
        status="ready", token=1, content={"sections": [{"heading": "Bob's", "items": [
            {"front": "Bob's front", "back": "Bob's back [1]"}]}], "citations": [
            {"n": 1, "kind": "document", "attachment_id": bob_attachment.pk, "file": "b.pdf",
             "page": 1, "quote": "Bob's back"}]},
    )  # fmt: skip
    # With an MP3 (an audio overview's file route): its 404 for Alice is not for want of one.
    from django.core.files.base import ContentFile

    output.audio.save("bobs-overview.mp3", ContentFile(b"ID3 Bob's audio"), save=True)
    return {
        "output": output.pk,
        "notebook": bob_notebook.pk,
        "note": bob_note.pk,
        "token": token.pk,
        "attachment": bob_attachment.pk,
        "conversation": conversation.pk,
        "message": answer.pk,
        "memory": memory.pk,
        "member": carol.pk,
    }


def _bobs_data_untouched(ids: dict[str, int]) -> None:
    from attachments.models import NoteAttachment
    from chat.models import Conversation, Memory, Message

    conversation = Conversation.objects.get(pk=ids["conversation"])
    assert conversation.title == "Bob's chat"
    assert list(conversation.messages.values_list("content", "status")) == [
        ("bob's question", "complete"),
        ("bob's answer", "error"),  # not retried
    ]
    assert Message.objects.count() == 2  # nothing asked in his conversation
    assert not Message.objects.filter(compacted=True).exists()  # nor compacted
    assert list(conversation.summaries.values_list("text", flat=True)) == ["Bob's summary"]
    assert Conversation.objects.count() == 1  # none started on his notebook or note
    # His memory: not deleted, not forgotten, none added.
    assert list(Memory.objects.values_list("pk", "text", "importance")) == [
        (ids["memory"], "bob's memory", 0.9)
    ]

    profile = SourceProfile.objects.get(attachment_id=ids["attachment"])
    assert (profile.doc_type, profile.better_name, profile.edited) == (
        "receipt",
        "Bob's receipt",
        False,
    )
    assert profile.extracted == {"merchant": "Bob's shop"}  # not edited through a page or the API
    assert not profile.name_accepted  # nor his file's name chosen

    # His notebook's members: none added, removed, changed or made owner.
    from notes.models import NotebookMembership

    assert list(NotebookMembership.objects.values_list("notebook_id", "user_id", "role")) == [
        (ids["notebook"], ids["member"], "viewer")
    ]
    assert Notebook.objects.filter(pk=ids["notebook"], owner__username="bob").exists()

    from studio.models import StudioOutput

    # His Studio output: not renamed, regenerated, cancelled or deleted; none made for him.
    assert list(StudioOutput.objects.values_list("pk", "title", "status", "token")) == [
        (ids["output"], "Bob's cards", "ready", 1)
    ]

    attachment = NoteAttachment.objects.get(pk=ids["attachment"])
    assert attachment.status == "needs_password"  # not reprocessed, unlocked or deleted
    assert attachment.password_attempts == 0
    assert NoteAttachment.objects.filter(note_id=ids["note"]).count() == 1


# The CSRF token every logged-in page carries (64 random letters and digits) spells "Bob"
# once in about 4,000 pages: it is left out of what is searched for Bob's things.
_CSRF = re.compile(rb'(name="csrfmiddlewaretoken" value="|"X-CSRFToken": ")[A-Za-z0-9]+')


def _shown(response: Any) -> bytes:
    return _CSRF.sub(rb"\1", response.content)


# Which object a URL's id names, by its keyword (for URLs taking more than one).
KWARG_KINDS = {"notebook_id": "notebook", "member_id": "member"}


def _url_for(name: str, object_id: int, ids: dict[str, int] | None = None) -> str:
    from django.urls import reverse

    pattern = app_patterns()[name]
    kwargs = list(pattern.pattern.converters)
    if len(kwargs) == 1:
        return reverse(name, kwargs={kwargs[0]: object_id})
    assert ids is not None, name
    return reverse(name, kwargs={kwarg: ids[KWARG_KINDS[kwarg]] for kwarg in kwargs})


PAGE_DATA = {"title": "pwned", "kind": "faq", "body": "pwned", "description": "pwned",
             "password": "x", "content": "pwned?", "action": "retry", "message_id": "0",
             "user": "alice", "role": "editor", "url": "https://example.org/pwned"}  # fmt: skip


def _request(
    client: Client, method: str, url: str, name: str = "", headers: dict[str, str] | None = None
) -> Any:
    if method == "POST" and name == "attachments:upload":
        return client.post(url, {**PAGE_DATA, "files": _pdf_upload()}, headers=headers)
    if method == "GET":
        return client.get(url, PAGE_DATA, headers=headers)
    body = urlencode(PAGE_DATA)
    form = "application/x-www-form-urlencoded"
    return client.generic(method, url, body, content_type=form, headers=headers)


@pytest.mark.parametrize("name", sorted(OBJECT_PAGES))
def test_pages_answer_404_for_another_users_objects(name, alice_client, bobs_objects, bob_note):
    """404 for every verb the view accepts; a verb it does not accept may answer 405, never
    anything else, and nothing changes either way."""
    kind, methods = OBJECT_PAGES[name]
    url = _url_for(name, bobs_objects[kind], bobs_objects)
    for method in VERBS:
        for headers in ({}, {"HX-Request": "true"}):
            response = _request(alice_client, method, url, name, headers)
            allowed = {404} if method in methods else {404, 405}
            assert response.status_code in allowed, (
                f"{method} {url} {headers} answered {response.status_code}"
            )
            assert b"Bob" not in _shown(response)
    _bobs_data_untouched(bobs_objects)
    bob_note.refresh_from_db()
    assert bob_note.title == "Bob's note"
    assert not bob_note.is_trashed
    assert Notebook.objects.filter(pk=bobs_objects["notebook"], title="Bob's secrets").exists()
    assert Note.objects.filter(notebook_id=bobs_objects["notebook"]).count() == 1


def _sent_to_login(response: Any) -> bool:
    return response.status_code == 302 and str(response["Location"]).startswith(
        "/accounts/login/?next="
    )


@pytest.mark.parametrize("name", sorted(OBJECT_PAGES))
def test_pages_redirect_anonymous_users_to_login(name, anon_client, bobs_objects):
    kind, methods = OBJECT_PAGES[name]
    url = _url_for(name, bobs_objects[kind], bobs_objects)
    for method in VERBS:
        response = _request(anon_client, method, url, name)
        if method in methods:
            assert _sent_to_login(response), f"{method} {url} answered {response.status_code}"
        else:
            assert _sent_to_login(response) or response.status_code == 405, (method, url)
    _bobs_data_untouched(bobs_objects)


@pytest.mark.parametrize("url", sorted(PLAIN_PAGES.values()))
def test_plain_pages_redirect_anonymous_users_to_login(url, anon_client):
    for method in VERBS:
        response = _request(anon_client, method, url)
        assert _sent_to_login(response) or (method != "GET" and response.status_code == 405), (
            f"{method} {url} answered {response.status_code}"
        )
    assert not Notebook.objects.exists()  # notebook_list's POST creates one: not anonymously


@pytest.mark.parametrize("url", sorted(STAFF_PAGES.values()))
def test_staff_pages_answer_404_to_anonymous_and_normal_users(url, anon_client, alice_client):
    for client in (anon_client, alice_client):
        for method in VERBS:
            response = _request(client, method, url)
            assert response.status_code == 404, f"{method} {url} answered {response.status_code}"


def test_every_query_id_page_is_known_here():
    assert set(QUERY_ID_PAGES) <= set(PLAIN_PAGES)


@pytest.mark.parametrize("name", sorted(QUERY_ID_PAGES))
def test_query_ids_naming_another_users_objects_answer_404(name, alice_client, bobs_objects):
    for combo in QUERY_ID_PAGES[name]:
        params = {k: bobs_objects.get(v, v) if k == "notebook" else v for k, v in combo.items()}
        for headers in ({}, {"HX-Request": "true"}):
            response = alice_client.get(PLAIN_PAGES[name], params, headers=headers)
            assert response.status_code == 404, (name, params, response.status_code)
            assert b"Bob" not in _shown(response)
    _bobs_data_untouched(bobs_objects)


def test_lists_never_show_another_users_objects(alice_client, bobs_objects):
    page = alice_client.get("/").content.decode()
    assert "Bob's secrets" not in page


# --- API --------------------------------------------------------------------------------------


def _pdf_upload():
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile("mine.pdf", sample("text.pdf"), "application/pdf")


API_WITH_IDS = {
    ("POST", "/api/notes/{note_id}/attachments"),
    ("POST", "/api/notebooks/{notebook_id}/links"),
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
    ("GET", "/api/conversations/{conversation_id}/summaries"),
    ("POST", "/api/conversations/{conversation_id}/compact"),
    ("POST", "/api/messages/{message_id}/retry"),
    ("GET", "/api/notebooks/{notebook_id}/memories"),
    ("DELETE", "/api/notebooks/{notebook_id}/memories"),
    ("DELETE", "/api/memories/{memory_id}"),
    ("GET", "/api/attachments/{attachment_id}/guide"),
    ("GET", "/api/notebooks/{notebook_id}/guide"),
    ("GET", "/api/attachments/{attachment_id}/profile"),
    ("PATCH", "/api/attachments/{attachment_id}/profile"),
    ("GET", "/api/notebooks/{notebook_id}/mentions"),
    ("GET", "/api/notebooks/{notebook_id}/members"),
    ("POST", "/api/notebooks/{notebook_id}/members"),
    ("PATCH", "/api/notebooks/{notebook_id}/members/{member_id}"),
    ("DELETE", "/api/notebooks/{notebook_id}/members/{member_id}"),
    ("POST", "/api/notebooks/{notebook_id}/owner"),
    ("GET", "/api/notebooks/{notebook_id}/export"),
    ("GET", "/api/conversations/{conversation_id}/export"),
    ("GET", "/api/notebooks/{notebook_id}/studio"),
    ("POST", "/api/notebooks/{notebook_id}/studio"),
    ("GET", "/api/studio/{output_id}"),
    ("PATCH", "/api/studio/{output_id}"),
    ("DELETE", "/api/studio/{output_id}"),
    ("POST", "/api/studio/{output_id}/regenerate"),
    ("POST", "/api/studio/{output_id}/cancel"),
    ("GET", "/api/studio/{output_id}/export"),
    ("GET", "/api/studio/{output_id}/audio"),
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
    ("GET", "/api/me/export"),
}


def test_every_api_operation_is_covered_by_this_test():
    assert set(api_operations()) == API_WITH_IDS | API_WITHOUT_IDS


def _fill(path: str, ids: dict[str, int]) -> str:
    return re.sub(r"\{(\w+)_id\}", lambda m: str(ids[m.group(1)]), path)


API_FIELDS = {"title": "pwned", "kind": "faq", "body": "pwned", "password": "x",
              "content": "pwned?", "user": "alice", "role": "editor",
              "url": "https://example.org/pwned"}  # fmt: skip
PATHS_WITH_IDS = sorted({path for _, path in API_WITH_IDS})


def _api_call(client: Client, method: str, url: str, ids: dict[str, int] | None = None) -> Any:
    if url.endswith("/attachments") and method == "POST":
        return client.post(url, {"files": [_pdf_upload()]})
    # A member of the notebook in the path where one is asked for (a hand-over).
    body = json.dumps({**API_FIELDS, "user_id": (ids or {}).get("member", 0)})
    return client.generic(method, url, body, content_type="application/json")


@pytest.mark.parametrize("path", PATHS_WITH_IDS)
def test_api_answers_404_for_another_users_objects(path, alice_api, bobs_objects):
    """404 for every operation of the path; another verb may answer 405, nothing else."""
    url = _fill(path, bobs_objects)
    for method in VERBS:
        response = _api_call(alice_api, method, url, bobs_objects)
        allowed = {404} if (method, path) in API_WITH_IDS else {404, 405}
        assert response.status_code in allowed, f"{method} {url} answered {response.status_code}"
        assert b"Bob" not in _shown(response)
    _bobs_data_untouched(bobs_objects)
    assert Note.objects.filter(pk=bobs_objects["note"], title="Bob's note").exists()
    assert Notebook.objects.filter(pk=bobs_objects["notebook"], title="Bob's secrets").exists()


@pytest.mark.parametrize("path", sorted({path for _, path in API_WITH_IDS | API_WITHOUT_IDS}))
def test_api_answers_401_to_anonymous_and_bad_tokens(path, bobs_objects):
    url = _fill(path, bobs_objects)
    known = {method for method, p in API_WITH_IDS | API_WITHOUT_IDS if p == path}
    for client in (Client(), Client(headers={"Authorization": "Bearer nbk_not-a-real-token"})):
        for method in VERBS:
            response = client.generic(method, url, "{}", content_type="application/json")
            allowed = {401} if method in known else {401, 405}
            assert response.status_code in allowed, (
                f"{method} {url} answered {response.status_code}"
            )
    _bobs_data_untouched(bobs_objects)


class Bobs:
    """One of Bob's objects, by kind, in a query or body (filled in by the test)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind


# Operations naming objects in their query or body: every combination naming one of Bob's
# objects answers 404 (Alice's own notebook beside Bob's note too).
API_ID_FILTERS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("GET", "/api/search"): [
        {"q": "bob", "notebook_id": Bobs("notebook")},
        {"q": "bob", "note_id": Bobs("note")},
        {"q": "bob", "attachment_ids": [Bobs("attachment")]},
        # The document-level mode and the doc-type filter check the same ids.
        {"q": "bob", "mode": "documents", "notebook_id": Bobs("notebook")},
        {"q": "bob", "mode": "documents", "note_id": Bobs("note"), "doc_type": "receipt"},
        {"q": "bob", "mode": "documents", "attachment_ids": [Bobs("attachment")]},
    ],
    ("POST", "/api/search"): [
        {"q": "bob", "notebook_id": Bobs("notebook")},
        {"q": "bob", "note_id": Bobs("note")},
        {"q": "bob", "attachment_ids": [Bobs("attachment")]},
        {"q": "bob", "mode": "documents", "notebook_id": Bobs("notebook")},
        {
            "q": "bob",
            "mode": "documents",
            "attachment_ids": [Bobs("attachment")],
            "doc_type": "invoice",
        },
    ],
    ("GET", "/api/conversations"): [
        {"notebook_id": Bobs("notebook")},
        {"note_id": Bobs("note")},
    ],
    # Alice's own notebook, handed to Bob's member: not hers to hand to.
    ("POST", "/api/notebooks/{notebook_id}/owner"): [{"user_id": Bobs("member")}],
    # A Studio output of Alice's own notebook, made from Bob's sources.
    ("POST", "/api/notebooks/{notebook_id}/studio"): [
        {"kind": "faq", "attachment_ids": [Bobs("attachment")]},
        {"kind": "faq", "note_ids": [Bobs("note")]},
    ],
    ("POST", "/api/conversations"): [
        {"notebook_id": Bobs("notebook")},
        {"notebook_id": Bobs("notebook"), "note_id": Bobs("note")},
        {"notebook_id": "alices", "note_id": Bobs("note")},
        {"notebook_id": "alices", "attachment_id": Bobs("attachment")},
        {"notebook_id": Bobs("notebook"), "attachment_id": Bobs("attachment")},
    ],
}


def _id_parameters(method: str, path: str) -> set[str]:
    """Names of the operation's query and body fields that name objects (`*_id`, `*_ids`),
    from the OpenAPI schema."""
    schema = api.get_openapi_schema()
    operation = schema["paths"][path][method.lower()]
    names = {p["name"] for p in operation.get("parameters", []) if p["in"] != "path"}
    for content in operation.get("requestBody", {}).get("content", {}).values():
        body = content.get("schema", {})
        if "$ref" in body:
            body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
        names |= set(body.get("properties", {}))
    return {name for name in names if name.endswith(("_id", "_ids"))}


def test_every_id_taking_query_or_body_is_covered_by_this_test():
    for method, path in sorted(API_WITH_IDS | API_WITHOUT_IDS):
        taken = _id_parameters(method, path)
        tried = {key for combo in API_ID_FILTERS.get((method, path), []) for key in combo}
        assert taken <= tried, f"{method} {path}: add {taken - tried} to API_ID_FILTERS"


@pytest.mark.parametrize(("method", "path"), sorted(API_ID_FILTERS))
def test_api_filters_naming_another_users_objects_answer_404(
    method, path, alice, alice_api, bobs_objects
):
    from notes.services import notebook_create

    alices = notebook_create(owner=alice, title="Alice's").pk

    def resolve(value: Any) -> Any:
        if isinstance(value, list):
            return [resolve(v) for v in value]
        if isinstance(value, Bobs):
            return bobs_objects[value.kind]
        return alices if value == "alices" else value

    url = _fill(path, {"notebook": alices})  # ids in the path: Alice's own
    for combo in API_ID_FILTERS[(method, path)]:
        params = {key: resolve(value) for key, value in combo.items()}
        if method == "GET":
            response = alice_api.get(url, params)
        else:
            response = alice_api.post(url, json.dumps(params), content_type="application/json")
        assert response.status_code == 404, f"{method} {path} {combo} -> {response.status_code}"
        assert b"Bob" not in _shown(response)
    _bobs_data_untouched(bobs_objects)


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


# --- WebSockets -------------------------------------------------------------------------------

# Every WebSocket route, with the kind of object its id names.
WS_ROUTES = {"ws/chat/<int:conversation_id>/": "conversation"}


def test_every_websocket_route_is_covered_by_this_test():
    assert {str(p.pattern) for p in websocket_urlpatterns} == set(WS_ROUTES)


def _ws_url(route: str, ids: dict[str, int]) -> str:
    return "/" + re.sub(r"<int:(\w+)_id>", lambda m: str(ids[m.group(1)]), route)


def _session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    client.get("/")  # the CSRF cookie too, as a browser has it
    return "; ".join(f"{k}={v.value}" for k, v in client.cookies.items()).encode()


def _connects(url: str, cookie: bytes, then: Callable[[WebsocketCommunicator], Any] | None = None):
    """Whether the socket is accepted (through the real ASGI stack: origin, session, routing);
    `then` runs on an accepted socket before it is closed."""

    async def go() -> bool:
        headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
        if cookie:
            headers.append((b"cookie", cookie))
        communicator = WebsocketCommunicator(application, url, headers=headers)
        connected, _ = await communicator.connect(timeout=10)
        if connected and then is not None:
            await then(communicator)
        await communicator.disconnect()
        return bool(connected)

    return async_to_sync(go)()


@pytest.mark.django_db(transaction=True)  # Channels closes connections around each query
@pytest.mark.parametrize("route", sorted(WS_ROUTES))
def test_sockets_refuse_anonymous_users_and_another_users_objects(route, alice, bobs_objects):
    from chat.services import conversation_create
    from notes.services import notebook_create

    alices = conversation_create(owner=alice, notebook=notebook_create(owner=alice, title="A"))
    mine = _ws_url(route, {WS_ROUTES[route]: alices.pk})
    bobs = _ws_url(route, bobs_objects)
    cookie = _session_cookie(alice)

    async def name_bobs_message(communicator: WebsocketCommunicator) -> None:
        # On her own socket, Alice names Bob's failed answer: nothing happens, nothing comes.
        frame = {"action": "retry", "message_id": bobs_objects["message"]}
        await communicator.send_to(text_data=json.dumps(frame))
        assert await communicator.receive_nothing(timeout=0.3)

    assert _connects(bobs, b"") is False
    assert _connects(mine, b"") is False
    assert _connects(bobs, cookie) is False
    assert _connects(mine, cookie, then=name_bobs_message) is True  # the control
    from chat.models import Conversation

    Conversation.objects.filter(pk=alices.pk).delete()  # so that Bob's data checks hold
    _bobs_data_untouched(bobs_objects)


# --- Agent tools ------------------------------------------------------------------------------

# Every agent tool, with the kind of object each of its id arguments names.
TOOL_ID_ARGS: dict[str, dict[str, str]] = {
    "document_search": {"note_id": "note"},
    "note_search": {},
    "note_read": {"note_id": "note"},
}
TOOL_CANARY = "zqxjisolationcanary"


def _registry() -> dict[str, Any]:
    from chat.tools import REGISTRY, builtin  # noqa: F401  (registers the built-in tools)

    return REGISTRY


def test_every_agent_tool_is_covered_by_this_test():
    registry = _registry()
    assert set(registry) == set(TOOL_ID_ARGS)
    for name, tool in registry.items():
        ids = {field for field in tool.args.model_fields if field.endswith(("_id", "_ids"))}
        assert ids == set(TOOL_ID_ARGS[name]), f"{name}: list its id arguments"


@pytest.mark.parametrize("name", sorted(TOOL_ID_ARGS))
def test_agent_tools_never_return_another_users_objects(name, alice, bob, bobs_objects):
    """Called in Alice's chats (about her notebook, and about her note) with Bob's ids and
    words only Bob's note contains, a tool answers from Alice's sources only."""
    from chat.tools import AnswerRequest
    from notes import indexing
    from notes.services import note_create, note_update, notebook_create

    bobs_note = Note.objects.get(pk=bobs_objects["note"])
    note_update(note=bobs_note, body=f"{TOOL_CANARY} bob only, the vault code")
    indexing.note_embed(note_id=bobs_note.pk)
    notebook = notebook_create(owner=alice, title="Alice's")
    hers = note_create(notebook=notebook, author=alice, title="Alice's note", body="the vault")
    indexing.note_embed(note_id=hers.pk)

    tool = _registry()[name]
    arguments: dict[str, Any] = {}
    for field, info in tool.args.model_fields.items():
        if field in TOOL_ID_ARGS[name]:
            arguments[field] = bobs_objects[TOOL_ID_ARGS[name][field]]
        elif field == "query":
            arguments[field] = f"{TOOL_CANARY} bob vault code"
        else:
            assert not info.is_required(), f"{name}.{field}: say what to pass"
    for context in (AnswerRequest(user=alice, notebook=notebook),
                    AnswerRequest(user=alice, notebook=notebook, note=hers)):  # fmt: skip
        result = tool.run(context, arguments)
        assert TOOL_CANARY not in result.content
        assert "Bob" not in result.content
        assert "bob only" not in result.content
        assert all(p["note_id"] == hers.pk for p in result.passages), result.passages
        assert all(s["note_id"] == hers.pk for s in context.sources)


# --- Compaction -------------------------------------------------------------------------------


def test_another_users_long_conversation_is_never_compacted_nor_its_summaries_read(
    alice_client, alice_api, bob, bob_notebook
):
    """Bob's conversation has enough messages to compact: whatever Alice posts, through the
    page or the API, answers 404 and leaves it as it was; his summaries stay his."""
    from chat.compaction import conversation_compact
    from chat.models import Conversation, Message

    conversation = Conversation.objects.create(owner=bob, notebook=bob_notebook, title="Bob's")
    for i in range(16):
        Message.objects.create(conversation=conversation, role="user", content=f"Bob asks {i}")
        Message.objects.create(conversation=conversation, role="assistant", content="Bob's.")
    for response in (
        alice_client.post(f"/chats/{conversation.pk}/compact/"),
        alice_client.post(f"/chats/{conversation.pk}/compact/", headers={"HX-Request": "true"}),
        alice_api.post(f"/api/conversations/{conversation.pk}/compact"),
        alice_api.get(f"/api/conversations/{conversation.pk}/summaries"),
    ):
        assert response.status_code == 404
        assert b"Bob" not in _shown(response)
    assert not conversation.summaries.exists()
    assert not conversation.messages.filter(compacted=True).exists()
    conversation_compact(conversation=conversation)  # the control: it could be compacted
    assert conversation.summaries.count() == 2
    response = alice_api.get(f"/api/conversations/{conversation.pk}/summaries")
    assert response.status_code == 404
    assert b"Bob" not in _shown(response)


# --- roles: Alice is a viewer of Bob's notebook ---------------------------------------------------

# Kinds that belong to their author even inside a shared notebook: a member gets 404.
PRIVATE_KINDS = {"conversation", "message", "memory", "token"}
# Pages a viewer may not even open: the forms of changes only editors or the owner make.
EDIT_FORMS = {"notes:note_edit", "notes:notebook_rename", "notes:notebook_delete",
              "notes:note_delete", "attachments:delete"}  # fmt: skip
# Changes a viewer may make: conversations of their own (asking), their own memory. Leaving
# is tested on its own (tests/notes/test_sharing.py): it ends the membership this test needs.
VIEWER_MAY = {"workspace:ask", "chat:ask_pdf", "chat:notebook_conversations",
              "chat:note_conversations", "chat:memories_forget"}  # fmt: skip
VIEWER_MAY_API = {("DELETE", "/api/notebooks/{notebook_id}/memories")}


@pytest.fixture
def shared_with_alice(bobs_objects, bob, alice):
    from notes.services import membership_add

    notebook = Notebook.objects.get(pk=bobs_objects["notebook"])
    membership_add(notebook=notebook, by=bob, identifier="alice", role="viewer")
    return bobs_objects


def _shared_data_untouched(ids: dict[str, int]) -> None:
    """Bob's things as they were; Alice may have started conversations of her own."""
    from attachments.models import NoteAttachment
    from chat.models import Conversation, Memory
    from notes.models import NotebookMembership

    conversation = Conversation.objects.get(pk=ids["conversation"])
    assert conversation.title == "Bob's chat"
    assert list(conversation.messages.values_list("content", "status")) == [
        ("bob's question", "complete"),
        ("bob's answer", "error"),
    ]
    assert list(conversation.summaries.values_list("text", flat=True)) == ["Bob's summary"]
    assert list(Memory.objects.filter(owner__username="bob").values_list("text", "importance")) == [
        ("bob's memory", 0.9)
    ]
    profile = SourceProfile.objects.get(attachment_id=ids["attachment"])
    assert (profile.doc_type, profile.better_name, profile.edited) == (
        "receipt",
        "Bob's receipt",
        False,
    )
    attachment = NoteAttachment.objects.get(pk=ids["attachment"])
    assert (attachment.status, attachment.password_attempts) == ("needs_password", 0)
    note = Note.objects.get(pk=ids["note"])
    assert (note.title, note.body, note.trashed_at) == ("Bob's note", "bob only", None)
    assert Note.objects.filter(notebook_id=ids["notebook"]).count() == 1
    assert Notebook.objects.filter(
        pk=ids["notebook"], title="Bob's secrets", owner__username="bob"
    ).exists()
    assert sorted(NotebookMembership.objects.values_list("user__username", "role")) == [
        ("alice", "viewer"), ("carol", "viewer"),
    ]  # fmt: skip


@pytest.mark.parametrize("name", sorted(OBJECT_PAGES))
def test_a_viewer_changes_nothing_and_never_sees_another_members_records(
    name, alice_client, shared_with_alice, bob
):
    """Every page on a shared notebook's things, with every verb it accepts: a viewer reads
    (2xx/3xx), is refused changes (403), and gets 404 for another member's conversations,
    messages, memories and tokens."""
    if name == "notes:notebook_leave":
        pytest.skip("leaving ends the membership: tests/notes/test_sharing.py")
    kind, methods = OBJECT_PAGES[name]
    url = _url_for(name, shared_with_alice[kind], shared_with_alice)
    owner = Client()
    owner.force_login(bob)
    for method in methods:
        for headers in ({}, {"HX-Request": "true"}):
            response = _request(alice_client, method, url, name, headers)
            status = response.status_code
            if kind in PRIVATE_KINDS:
                assert status == 404, f"{method} {url} answered {status}"
                assert b"bob's" not in response.content.lower()
            elif name in VIEWER_MAY:
                assert status not in (403, 500), f"{method} {url} answered {status}"
            elif method == "GET" and name not in EDIT_FORMS:
                # What the owner gets (a source without a thumbnail yet: 404 for him too).
                owners = _request(owner, method, url, name, headers).status_code
                assert status == owners, f"{method} {url} answered {status}, the owner {owners}"
            else:
                assert status == 403, f"{method} {url} answered {status}"
    _shared_data_untouched(shared_with_alice)


@pytest.mark.parametrize(("method", "path"), sorted(API_WITH_IDS))
def test_a_viewer_changes_nothing_through_the_api(method, path, alice_api, shared_with_alice):
    url = _fill(path, shared_with_alice)
    kinds = set(re.findall(r"\{(\w+)_id\}", path))
    response = _api_call(alice_api, method, url, shared_with_alice)
    status = response.status_code
    if kinds & PRIVATE_KINDS:
        assert status == 404, f"{method} {url} answered {status}"
    elif method == "GET" or (method, path) in VIEWER_MAY_API:
        assert status < 400, f"{method} {url} answered {status}: {response.content[:200]}"
    else:
        assert status == 403, f"{method} {url} answered {status}"
    _shared_data_untouched(shared_with_alice)


# --- MCP tools (/mcp) -------------------------------------------------------------------------

# Every MCP tool (mcpserver.server), with the kind of object each of its id arguments names.
MCP_TOOL_ID_ARGS: dict[str, dict[str, str]] = {
    "document_search": {"notebook_id": "notebook", "note_id": "note"},
    "note_search": {"notebook_id": "notebook"},
    "note_read": {"note_id": "note"},
    "list_notebooks": {},
    "ask": {"notebook_id": "notebook"},
}


def _mcp_tools() -> dict[str, dict[str, Any]]:
    from mcpserver.server import mcp

    return {tool.name: tool.input_schema for tool in async_to_sync(mcp.list_tools)()}


def test_every_mcp_tool_is_covered_by_this_test():
    from mcpserver.tools import TOOLS

    tools = _mcp_tools()
    assert set(tools) == set(MCP_TOOL_ID_ARGS) == set(TOOLS)
    for name, schema in tools.items():
        ids = {field for field in schema.get("properties", {}) if field.endswith(("_id", "_ids"))}
        assert ids == set(MCP_TOOL_ID_ARGS[name]), f"{name}: list its id arguments"


@pytest.mark.parametrize("name", sorted(MCP_TOOL_ID_ARGS))
def test_mcp_tools_never_return_another_users_objects(name, alice, bob, bobs_objects):
    """Called as Alice with Bob's ids (each in turn, the others left out) and words only Bob's
    note contains, an MCP tool says "not found" or answers from Alice's sources only."""
    from mcpserver.tools import TOOLS, Caller, ToolFailure
    from notes import indexing
    from notes.services import note_create, note_update, notebook_create

    bobs_note = Note.objects.get(pk=bobs_objects["note"])
    note_update(note=bobs_note, body=f"{TOOL_CANARY} bob only, the vault code")
    indexing.note_embed(note_id=bobs_note.pk)
    notebook = notebook_create(owner=alice, title="Alice's")
    hers = note_create(notebook=notebook, author=alice, title="Alice's note", body="the vault")
    indexing.note_embed(note_id=hers.pk)

    schema = _mcp_tools()[name]
    words = {field: f"{TOOL_CANARY} bob vault code" for field in ("query", "question")}
    base = {k: v for k, v in words.items() if k in schema.get("properties", {})}
    calls = [{**base, field: bobs_objects[kind]} for field, kind in MCP_TOOL_ID_ARGS[name].items()]
    # Without ids too, where none is required; but `ask` then answers in Alice's one notebook,
    # which waits for a commit this test never makes (tests/mcpserver asks for real).
    if not set(schema.get("required", [])) & set(MCP_TOOL_ID_ARGS[name]) and name != "ask":
        calls.append(base)
    for arguments in calls:
        refusal = ""
        try:
            result = TOOLS[name](Caller(user=alice, base_url="http://testserver"), **arguments)
        except ToolFailure as exc:
            refusal = str(exc)
        if refusal:  # the "not found" of a missing id
            assert refusal.startswith("No "), refusal
            assert "Bob" not in refusal
            continue
        text = json.dumps(result)
        assert TOOL_CANARY not in text or name == "ask", (name, arguments)
        assert "Bob" not in text, (name, arguments)
        assert "bob only" not in text, (name, arguments)
        assert bobs_objects["notebook"] not in {nb["id"] for nb in result.get("notebooks", [])}
        for passage in result.get("results", []):
            assert passage["note_id"] == hers.pk, passage
