"""Scoped personal access tokens: read-only, limited to notebooks; created on the settings
page, shown in its list, honoured by the REST API (the MCP server: tests/mcpserver)."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from accounts.models import ApiToken
from accounts.services import api_token_create
from chat.models import Conversation, Message
from notes.models import Notebook
from notes.services import note_create, notebook_create

pytestmark = pytest.mark.django_db


def _api(raw: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {raw}"})


def test_the_settings_page_creates_a_scoped_token_and_lists_its_scope(alice_client, alice, bob):
    garden = notebook_create(owner=alice, title="Garden")
    notebook_create(owner=alice, title="Kitchen")
    bobs = notebook_create(owner=bob, title="Bob's vault")
    page = alice_client.get("/settings/").content.decode()
    assert "Garden" in page
    assert "Kitchen" in page
    assert "Bob's vault" not in page  # the choices are her notebooks only

    response = alice_client.post(
        "/settings/", {"name": "reader", "read_only": "on", "notebooks": [garden.pk]}
    )
    assert response.status_code == 200
    token = ApiToken.objects.get(name="reader")
    assert token.read_only
    assert token.notebook_limited
    assert list(token.notebooks.all()) == [garden]
    cell = response.content.decode().split('data-testid="token-scope">')[1].split("</td>")[0]
    assert cell == "read-only · Garden"

    alice_client.post("/settings/", {"name": "everything"})
    token = ApiToken.objects.get(name="everything")
    assert (token.read_only, token.notebook_limited) == (False, False)

    refused = alice_client.post("/settings/", {"name": "sneaky", "notebooks": [bobs.pk]})
    assert refused.status_code == 200
    assert "Select a valid choice" in refused.content.decode()
    assert not ApiToken.objects.filter(name="sneaky").exists()


def test_a_token_cannot_be_limited_to_another_users_notebook(alice, bob):
    bobs = notebook_create(owner=bob, title="Bob's vault")
    with pytest.raises(ValidationError) as refused:
        api_token_create(user=alice, name="sneaky", notebook_ids=[bobs.pk])
    assert "notebooks" in refused.value.message_dict
    assert not ApiToken.objects.exists()


def test_a_read_only_token_gets_403_on_every_write_and_reads_as_before(alice):
    garden = notebook_create(owner=alice, title="Garden")
    _, raw = api_token_create(user=alice, name="reader", read_only=True)
    api = _api(raw)
    assert api.get("/api/notebooks").status_code == 200
    assert api.get(f"/api/notebooks/{garden.pk}").status_code == 200
    writes = [
        api.post("/api/notebooks", json.dumps({"title": "x"}), content_type="application/json"),
        api.patch(f"/api/notebooks/{garden.pk}", json.dumps({"title": "x"}), "application/json"),
        api.delete(f"/api/notebooks/{garden.pk}"),
        api.post(f"/api/notebooks/{garden.pk}/notes", "{}", content_type="application/json"),
    ]
    for response in writes:
        assert response.status_code == 403
        assert response.json()["detail"].startswith("This token is read-only")
    assert Notebook.objects.get(pk=garden.pk).title == "Garden"
    assert Notebook.objects.count() == 1


def test_a_limited_token_sees_only_its_notebooks_through_the_api(alice):
    garden = notebook_create(owner=alice, title="Garden")
    kitchen = notebook_create(owner=alice, title="Kitchen")
    pots = note_create(notebook=kitchen, author=alice, title="Pots", body="Kettles.")
    _, raw = api_token_create(user=alice, name="garden", notebook_ids=[garden.pk])
    api = _api(raw)
    assert [nb["title"] for nb in api.get("/api/notebooks").json()["items"]] == ["Garden"]
    assert api.get(f"/api/notebooks/{kitchen.pk}").status_code == 404
    assert api.get(f"/api/notes/{pots.pk}").status_code == 404
    assert api.delete(f"/api/notebooks/{kitchen.pk}").status_code == 404
    assert Notebook.objects.filter(pk=kitchen.pk).exists()
    # Her session (and an unlimited token) still see both.
    _, everything = api_token_create(user=alice, name="all")
    assert len(_api(everything).get("/api/notebooks").json()["items"]) == 2


def test_a_limited_token_whose_notebooks_are_gone_sees_none(alice):
    garden = notebook_create(owner=alice, title="Garden")
    notebook_create(owner=alice, title="Kitchen")
    _, raw = api_token_create(user=alice, name="garden", notebook_ids=[garden.pk])
    garden.delete()
    assert _api(raw).get("/api/notebooks").json()["items"] == []


def test_a_limited_token_cannot_choose_sources_of_another_notebook_for_a_question(alice):
    garden = notebook_create(owner=alice, title="Garden")
    kitchen = notebook_create(owner=alice, title="Kitchen")
    conversation = Conversation.objects.create(owner=alice, notebook=garden, title="Chat")
    _, raw = api_token_create(user=alice, name="garden", notebook_ids=[garden.pk])
    chip = {"kind": "path", "ref": f"notebook:{kitchen.pk}"}
    response = _api(raw).post(
        f"/api/conversations/{conversation.pk}/messages",
        json.dumps({"content": "Kettles?", "selections": [chip]}),
        content_type="application/json",
    )
    assert response.status_code == 404, response.content
    assert not Message.objects.exists()
