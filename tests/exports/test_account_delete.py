"""Deleting an account: only with the password (or the username, without one), everything the
user owns goes in one transaction and their files after it, other people's data stays."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from accounts.models import ApiToken
from accounts.services import api_token_create
from attachments.models import NoteAttachment
from chat.models import Conversation, Memory
from exports.services import account_delete
from notes.models import Note, Notebook, NotebookMembership
from notes.services import membership_add, note_create, notebook_create
from tests.factories import UserFactory
from tests.fixtures.documents import text_pdf, upload

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"  # tests.factories.UserFactory's


@pytest.fixture
def alices(alice):
    book = notebook_create(owner=alice, title="Field notes")
    note = note_create(notebook=book, author=alice, title="Heron", body="waits")
    source = upload(alice, note, "survey.pdf", text_pdf(["The heron waited."]))
    Conversation.objects.create(owner=alice, notebook=book, title="Herons")
    Memory.objects.create(owner=alice, notebook=book, kind="fact", text="Likes herons")
    api_token_create(user=alice, name="script")
    return {"book": book, "note": note, "source": source, "file": Path(source.file.path)}


def test_the_page_says_what_goes_and_asks_for_the_password(alice_client, alices):
    page = alice_client.get("/settings/delete/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "1 notebook you own" in html
    assert "with 1 note" in html
    assert "1 source file" in html
    assert "1 conversation of yours" in html
    assert "1 personal access token" in html
    assert 'type="password"' in html
    assert 'autocomplete="current-password"' in html


def test_without_the_right_password_nothing_is_deleted(alice, alice_client, alices):
    for data in ({}, {"confirmation": ""}, {"confirmation": "wrong"},
                 {"confirmation": "alice"}):  # fmt: skip
        response = alice_client.post("/settings/delete/", data)
        assert response.status_code == 400, data
    assert b"That is not your password." in response.content
    assert User.objects.filter(pk=alice.pk).exists()
    assert Notebook.objects.filter(pk=alices["book"].pk).exists()
    assert alices["file"].exists()
    assert alice_client.get("/settings/").status_code == 200  # still logged in


def test_deleting_removes_the_account_its_rows_and_files_and_logs_out(
    alice, bob, alice_client, alices, django_capture_on_commit_callbacks
):
    bobs = notebook_create(owner=bob, title="Bob's")
    bobs_note = note_create(notebook=bobs, author=bob, title="Bob's note", body="his")
    bobs_source = upload(bob, bobs_note, "his.pdf", text_pdf(["His survey."]))
    # Alice's conversation in Bob's notebook (as a member, once sharing exists) goes with her.
    Conversation.objects.create(owner=alice, notebook=bobs, title="Alice in Bob's")

    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post("/settings/delete/", {"confirmation": PASSWORD})

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/"
    assert not User.objects.filter(pk=alice.pk).exists()
    assert not Notebook.objects.filter(pk=alices["book"].pk).exists()
    assert not Note.objects.filter(pk=alices["note"].pk).exists()
    assert not NoteAttachment.objects.filter(pk=alices["source"].pk).exists()
    assert not Conversation.objects.filter(owner_id=alice.pk).exists()
    assert not Memory.objects.filter(owner_id=alice.pk).exists()
    assert not ApiToken.objects.filter(user_id=alice.pk).exists()
    assert not alices["file"].exists()  # removed after the commit
    # Bob's things stay.
    assert Notebook.objects.filter(pk=bobs.pk).exists()
    assert Path(bobs_source.file.path).exists()
    # Logged out, and the login page says what happened.
    login = alice_client.get("/accounts/login/")
    assert "everything it owned are deleted" in login.content.decode()
    assert alice_client.get("/settings/").status_code == 302


def test_a_rolled_back_deletion_keeps_the_files(alice, alices, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        account_delete(user=alice)
    assert callbacks  # the files' removal waits for a commit that, here, never comes
    assert alices["file"].exists()


def test_an_account_without_a_password_confirms_with_its_username(db):
    sso = UserFactory.create(username="sso-user")
    sso.set_unusable_password()
    sso.save()
    client = Client()
    client.force_login(sso)
    page = client.get("/settings/delete/").content.decode()
    assert "Type your username to confirm" in page
    assert client.post("/settings/delete/", {"confirmation": "sso"}).status_code == 400
    assert client.post("/settings/delete/", {"confirmation": "!"}).status_code == 400
    assert User.objects.filter(pk=sso.pk).exists()
    assert client.post("/settings/delete/", {"confirmation": "sso-user"}).status_code == 302
    assert not User.objects.filter(pk=sso.pk).exists()


def test_a_handover_only_to_a_member_of_a_notebook_the_user_owns(alice, alices, bob):
    others = notebook_create(owner=bob, title="Bob's")
    membership_add(notebook=others, by=bob, identifier="alice", role="editor")
    for handover in ({alices["book"].pk: bob.pk},  # Bob is no member of hers
                     {others.pk: alice.pk}):  # not hers to hand over  # fmt: skip
        with pytest.raises(ValidationError):
            account_delete(user=alice, handover=handover)
    assert User.objects.filter(pk=alice.pk).exists()
    result = account_delete(user=alice, handover={})
    assert (result.username, result.notebooks, result.sources) == ("alice", 1, 1)
    assert Notebook.objects.filter(pk=others.pk, owner=bob).exists()  # hers as a member: kept
    assert not NotebookMembership.objects.exists()


def test_a_shared_notebook_is_handed_to_the_member_chosen_on_the_page(
    alice, alice_client, alices, bob
):
    """The page offers each shared notebook to its members (or deletion); the chosen member
    owns it after, with its notes and sources and their own conversations; Alice's go."""
    book = alices["book"]
    membership_add(notebook=book, by=alice, identifier="bob", role="viewer")
    bobs_chat = Conversation.objects.create(owner=bob, notebook=book, title="Bob's question")
    page = alice_client.get("/settings/delete/").content.decode()
    assert "Notebooks you share with others" in page
    assert "Hand it to bob" in page
    assert "Delete it for everyone" in page
    response = alice_client.post(
        "/settings/delete/", {"confirmation": PASSWORD, f"handover_{book.pk}": str(bob.pk)}
    )
    assert response.status_code == 302
    book.refresh_from_db()
    assert book.owner == bob
    assert not NotebookMembership.objects.filter(notebook=book).exists()  # Alice's row went
    assert Note.objects.filter(notebook=book, title="Heron").exists()
    assert NoteAttachment.objects.filter(pk=alices["source"].pk).exists()
    assert alices["file"].exists()
    assert list(Conversation.objects.values_list("pk", flat=True)) == [bobs_chat.pk]
    assert not Memory.objects.exists()  # hers, gone with her


def test_a_shared_notebook_can_be_deleted_for_everyone(alice, alice_client, alices, bob):
    book = alices["book"]
    membership_add(notebook=book, by=alice, identifier="bob", role="editor")
    response = alice_client.post(
        "/settings/delete/", {"confirmation": PASSWORD, f"handover_{book.pk}": "delete"}
    )
    assert response.status_code == 302
    assert not Notebook.objects.filter(pk=book.pk).exists()
    bad = Client()
    bad.force_login(bob)
    assert bad.get(f"/notebooks/{book.pk}/").status_code == 404
