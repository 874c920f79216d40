"""The Markdown preview renders what is posted, so it is bounded: a body longer than a note may
be is not rendered, and previews per user are rate-limited; both refusals are shown in the
preview pane."""

from __future__ import annotations

import pytest
from django.core.cache import caches
from django.test import Client

from notebook.env import env_rate
from tests.factories import NotebookFactory, NoteFactory

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def _clear_counts():
    yield
    caches["ratelimit"].clear()


def preview(client: Client, note_id: int, body: str):
    return client.post(f"/notes/{note_id}/preview/", {"body": body}, headers=HTMX)


def own_note(user) -> int:
    return NoteFactory.create(notebook=NotebookFactory.create(owner=user), author=user).pk


def test_a_body_longer_than_a_note_may_be_is_not_rendered(alice_client, alice, settings):
    settings.NOTE_BODY_MAX_CHARS = 1000
    note_id = own_note(alice)

    at_limit = preview(alice_client, note_id, "*a*" + "x" * 997)
    assert at_limit.status_code == 200
    assert "<em>a</em>" in at_limit.content.decode()

    too_long = preview(alice_client, note_id, "*a*" + "x" * 998)
    body = too_long.content.decode()
    assert too_long.status_code == 200  # htmx swaps it into the pane
    assert body.lstrip().startswith('<div id="preview"')
    assert "Too long to preview: 1,001 characters, and a note holds at most 1,000." in body
    assert "<em>" not in body


def test_an_oversized_preview_never_reaches_the_markdown_renderer(
    alice_client, alice, settings, monkeypatch
):
    settings.NOTE_BODY_MAX_CHARS = 1000

    def fail(source: str) -> str:
        raise AssertionError("rendered")

    monkeypatch.setattr("notes.views.render_markdown", fail)
    response = preview(alice_client, own_note(alice), "[" * 5000)
    assert "Too long to preview" in response.content.decode()


def test_previews_beyond_the_limit_answer_429_in_the_pane(alice_client, alice, bob, settings):
    # Hourly: a window that ends during the test would let a refused preview through.
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "preview": "2/h"}
    note_id = own_note(alice)
    assert preview(alice_client, note_id, "*one*").status_code == 200
    assert preview(alice_client, note_id, "*two*").status_code == 200

    refused = preview(alice_client, note_id, "*three*")
    body = refused.content.decode()
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 3600 + 360  # an hour, and up to a slice more
    assert body.lstrip().startswith('<div id="preview"')
    assert "Too many previews (at most 2 an hour). Try again in" in body
    assert "<em>three</em>" not in body

    # Per user: bob's budget is his own.
    bob_client = Client()
    bob_client.force_login(bob)
    assert preview(bob_client, own_note(bob), "*bob*").status_code == 200


def test_another_users_note_cannot_be_previewed_against(alice, bob):
    bob_client = Client()
    bob_client.force_login(bob)
    assert preview(bob_client, own_note(alice), "*x*").status_code == 404


def test_previews_have_their_own_limit(settings):
    assert env_rate("PREVIEW_RATE_LIMIT", "120/m") == settings.RATE_LIMITS["preview"]
