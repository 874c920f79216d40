"""Shared notebooks (#34): the owner shares with other users as viewer or editor, through the
pages and the API; viewers read, search and ask in conversations of their own but change
nothing; editors also edit notes; revoking takes effect on the next request, API call and open
socket; conversations and memories stay private to their author."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.test import Client

from accounts.services import api_token_create
from chat import services as chat_services
from chat.models import Conversation, Memory
from notes.models import Note, NotebookMembership
from notes.services import membership_add, membership_remove, note_create
from tests.factories import NotebookFactory, UserFactory
from tests.fixtures.sockets import socket

pytestmark = pytest.mark.django_db


@pytest.fixture
def carol(db):
    return UserFactory.create(username="carol", email="carol@example.org")


@pytest.fixture
def shared(bob, alice, carol):
    """Bob's notebook, shared with Alice as viewer and Carol as editor."""
    notebook = NotebookFactory.create(owner=bob, title="Team handbook")
    note = note_create(notebook=notebook, author=bob, title="Onboarding", body="Badges at desk 4.")
    membership_add(notebook=notebook, by=bob, identifier="alice", role="viewer")
    membership_add(notebook=notebook, by=bob, identifier="carol@example.org", role="editor")
    return {"notebook": notebook, "note": note}


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_of(user) -> Client:
    _, raw = api_token_create(user=user, name="tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def test_the_notebook_list_has_a_shared_with_me_section(shared, alice):
    page = client_of(alice).get("/").content.decode()
    assert "Shared with me" in page
    assert "Team handbook" in page
    assert "shared by bob" in page
    assert f"/notebooks/{shared['notebook'].pk}/rename/" not in page  # not hers to rename


def test_a_viewer_reads_but_changes_nothing(shared, alice):
    client, note, notebook = client_of(alice), shared["note"], shared["notebook"]
    assert client.get(f"/notes/{note.pk}/").status_code == 200
    assert client.get(f"/notebooks/{notebook.pk}/").status_code == 200
    workspace = client.get(f"/notebooks/{notebook.pk}/").content.decode()
    assert "data-dropzone" not in workspace  # no upload for a viewer
    assert f"/notes/{note.pk}/edit/" not in workspace
    for url, data in [
        (f"/notes/{note.pk}/edit/", {"title": "Pwned", "body": "x"}),
        (f"/notes/{note.pk}/trash/", {}),
        (f"/notebooks/{notebook.pk}/notes/new/", {"title": "Mine"}),
        (f"/notebooks/{notebook.pk}/rename/", {"title": "Pwned"}),
        (f"/notebooks/{notebook.pk}/delete/", {}),
        (f"/notebooks/{notebook.pk}/share/", {"user": "bob", "role": "editor"}),
    ]:
        response = client.post(url, data)
        assert response.status_code == 403, (url, response.status_code)
    assert "not change it" in client.post(f"/notes/{note.pk}/trash/").content.decode()
    note.refresh_from_db()
    assert (note.title, note.trashed_at) == ("Onboarding", None)
    assert Note.objects.filter(notebook=notebook).count() == 1
    api = api_of(alice)
    assert api.get(f"/api/notes/{note.pk}").status_code == 200
    response = api.patch(
        f"/api/notes/{note.pk}", json.dumps({"title": "Pwned"}), content_type="application/json"
    )
    assert response.status_code == 403
    assert "editor" in response.json()["detail"]


def test_an_editor_edits_notes_and_is_shown_as_the_last_editor(shared, carol, bob):
    note = shared["note"]
    client = client_of(carol)
    response = client.post(f"/notes/{note.pk}/edit/", {"title": "Onboarding", "body": "Desk 5."})
    assert response.status_code == 302
    note.refresh_from_db()
    assert (note.body, note.author, note.last_edited_by) == ("Desk 5.", bob, carol)
    assert "last edited by carol" in client_of(bob).get(f"/notes/{note.pk}/").content.decode()
    pane = client_of(bob).get(f"/notebooks/{shared['notebook'].pk}/").content.decode()
    assert "Edited by carol" in pane
    # Editing is not owning: no renaming, deleting or sharing.
    for url in ("rename", "delete", "share"):
        assert (
            client.post(f"/notebooks/{shared['notebook'].pk}/{url}/", {"title": "x"}).status_code
            == 403
        )


def test_conversations_and_memories_stay_private_to_their_author(shared, alice, carol, bob):
    notebook = shared["notebook"]
    alices = chat_services.conversation_create(owner=alice, notebook=notebook)
    Memory.objects.create(owner=alice, notebook=notebook, kind="fact", text="alice likes tea")
    for other in (carol, bob):
        client = client_of(other)
        assert client.get(f"/chats/{alices.pk}/").status_code == 404
        listing = client.get(f"/notebooks/{notebook.pk}/chats/").content.decode()
        assert f"/chats/{alices.pk}/" not in listing
        assert (
            "alice likes tea"
            not in client.get(f"/notebooks/{notebook.pk}/memories/").content.decode()
        )
        assert api_of(other).get(f"/api/conversations/{alices.pk}").status_code == 404
    # She can ask in her own conversation of the shared notebook.
    assert client_of(alice).get(f"/chats/{alices.pk}/").status_code == 200


def test_revoking_takes_effect_on_the_next_request_and_api_call(shared, alice, bob):
    notebook, note = shared["notebook"], shared["note"]
    page, api = client_of(alice), api_of(alice)
    assert page.get(f"/notes/{note.pk}/").status_code == 200
    assert api.get(f"/api/notebooks/{notebook.pk}").status_code == 200
    owner = client_of(bob)
    membership = NotebookMembership.objects.get(notebook=notebook, user=alice)
    assert owner.post(f"/notebooks/{notebook.pk}/members/{alice.pk}/remove/").status_code == 302
    assert not NotebookMembership.objects.filter(pk=membership.pk).exists()
    assert page.get(f"/notes/{note.pk}/").status_code == 404
    assert api.get(f"/api/notebooks/{notebook.pk}").status_code == 404
    assert "Team handbook" not in page.get("/").content.decode()


def test_the_owner_shares_changes_roles_and_hands_over_through_the_page(bob, alice):
    notebook = NotebookFactory.create(owner=bob, title="Plans")
    owner = client_of(bob)
    url = f"/notebooks/{notebook.pk}/share/"
    refused = owner.post(url, {"user": "nobody-here", "role": "viewer"})
    assert refused.status_code == 400
    assert "No one on this instance" in refused.content.decode()
    assert owner.post(url, {"user": "bob", "role": "viewer"}).status_code == 400  # himself
    assert owner.post(url, {"user": "alice", "role": "admin"}).status_code == 400
    assert not NotebookMembership.objects.exists()
    assert owner.post(url, {"user": "ALICE", "role": "viewer"}).status_code == 302
    assert NotebookMembership.objects.get().role == "viewer"
    assert "alice" in owner.get(url).content.decode()
    member_url = f"/notebooks/{notebook.pk}/members/{alice.pk}/"
    assert owner.post(member_url, {"role": "editor"}).status_code == 302
    assert NotebookMembership.objects.get().role == "editor"
    assert owner.post(member_url + "owner/").status_code == 302
    notebook.refresh_from_db()
    assert notebook.owner == alice
    assert NotebookMembership.objects.get().user == bob  # the old owner stays on as an editor
    assert NotebookMembership.objects.get().role == "editor"
    assert (
        client_of(alice).post(f"/notebooks/{notebook.pk}/rename/", {"title": "Alice's"}).status_code
        == 302
    )
    assert owner.post(f"/notebooks/{notebook.pk}/rename/", {"title": "Bob's"}).status_code == 403


def test_a_member_leaves(shared, alice):
    client = client_of(alice)
    assert client.post(f"/notebooks/{shared['notebook'].pk}/leave/").status_code == 302
    assert client.get(f"/notebooks/{shared['notebook'].pk}/").status_code == 404


def test_the_sharing_api(bob, alice, carol):
    notebook = NotebookFactory.create(owner=bob, title="Plans")
    api, base = api_of(bob), f"/api/notebooks/{notebook.pk}"
    added = api.post(
        f"{base}/members",
        json.dumps({"user": "alice", "role": "editor"}),
        content_type="application/json",
    )
    assert added.status_code == 201, added.content
    assert added.json()["username"] == "alice"
    again = api.post(
        f"{base}/members",
        json.dumps({"user": "alice", "role": "viewer"}),
        content_type="application/json",
    )
    assert (again.status_code, again.json()["role"]) == (200, "viewer")
    unknown = api.post(
        f"{base}/members", json.dumps({"user": "zed"}), content_type="application/json"
    )
    assert unknown.status_code == 422
    assert "No one" in unknown.json()["detail"]
    assert [m["username"] for m in api.get(f"{base}/members").json()] == ["alice"]
    alice_api = api_of(alice)
    seen = alice_api.get(base).json()
    assert (seen["role"], seen["owner"]) == ("viewer", "bob")
    assert alice_api.get(f"{base}/members").status_code == 200  # members see who has access
    assert (
        alice_api.post(
            f"{base}/members", json.dumps({"user": "carol"}), content_type="application/json"
        ).status_code
        == 403
    )
    patched = api.patch(
        f"{base}/members/{alice.pk}",
        json.dumps({"role": "editor"}),
        content_type="application/json",
    )
    assert patched.json()["role"] == "editor"
    moved = api.post(
        f"{base}/owner", json.dumps({"user_id": alice.pk}), content_type="application/json"
    )
    assert (moved.status_code, moved.json()["role"]) == (200, "editor")
    assert alice_api.get(base).json()["role"] == "owner"
    assert api.delete(f"{base}/members/{bob.pk}").status_code == 204  # Bob leaves
    assert api.get(base).status_code == 404
    assert api_of(carol).get(f"{base}/members").status_code == 404  # never a member


@pytest.mark.django_db(transaction=True)  # Channels reads through connections of its own
def test_an_open_socket_closes_when_its_member_is_revoked(shared, alice, bob):
    conversation = chat_services.conversation_create(owner=alice, notebook=shared["notebook"])
    cookie_client = client_of(alice)
    cookie_client.get("/")
    cookie = "; ".join(f"{k}={v.value}" for k, v in cookie_client.cookies.items()).encode()
    membership = NotebookMembership.objects.get(notebook=shared["notebook"], user=alice)

    async def go():
        communicator = socket(conversation.pk, cookie)
        connected, _ = await communicator.connect()
        assert connected
        await database_sync_to_async(membership_remove)(membership=membership)
        return await communicator.receive_output(timeout=10)

    closed = async_to_sync(go)()
    assert closed == {"type": "websocket.close", "code": 4404}
    assert Conversation.objects.filter(pk=conversation.pk).exists()  # hers, out of reach
