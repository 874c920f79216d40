"""What a user's searches may cost: searches per user (SEARCH_RATE_LIMIT, page and API
together) answer 429 with when to come back, shown where the results go."""

from __future__ import annotations

import pytest
from django.core.cache import caches
from django.test import Client

from tests.factories import NotebookFactory, NoteFactory
from tests.search.test_retrieval import make_attachment

pytestmark = pytest.mark.django_db
REFUSAL = "You are searching too fast (at most 2 searches an hour). Try again in"
HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def _clear_counts():
    yield
    caches["ratelimit"].clear()


@pytest.fixture
def bob_client(bob) -> Client:
    client = Client()
    client.force_login(bob)
    return client


@pytest.fixture
def shelf(alice, bob):
    for user in (alice, bob):
        note = NoteFactory.create(notebook=NotebookFactory.create(owner=user))
        make_attachment(note, ["Grocery receipt from the supermarket: milk, bread."],
                        config="english")  # fmt: skip


def search_page(client: Client, q: str = "receipt", **headers: str):
    return client.get("/search/", {"q": q, "mode": "lexical"}, headers=headers)


def assert_retry_after(response) -> None:
    assert 0 < int(response["Retry-After"]) <= 3600 + 360  # an hour, and up to a slice more


# --- Searches per user -------------------------------------------------------------------------


def test_searches_beyond_the_limit_are_refused_where_the_results_go(
    settings, alice_client, bob_client, shelf
):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "search": "2/h"}
    assert search_page(alice_client).status_code == 200
    # Looking at the page, or a query too long to search, costs nothing.
    assert alice_client.get("/search/").status_code == 200
    assert alice_client.get("/search/", {"q": "x" * 2001}).status_code == 200
    assert search_page(alice_client, **HTMX).status_code == 200

    refused = search_page(alice_client)
    assert refused.status_code == 429
    assert_retry_after(refused)
    page = refused.content.decode()
    assert 'id="search-refused"' in page
    assert REFUSAL in page
    assert "milk" not in page  # no results
    assert 'value="receipt"' in page  # the query stays in the form

    fragment = search_page(alice_client, **HTMX)
    assert fragment.status_code == 429
    assert_retry_after(fragment)
    assert fragment.content.decode().lstrip().startswith('<div id="search-results">')
    assert REFUSAL in fragment.content.decode()

    assert "milk" in search_page(bob_client).content.decode()  # bob's searches are his own


def test_the_api_shares_the_budget_and_answers_429_json(settings, alice_client, alice_api, shelf):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "search": "2/h"}
    assert search_page(alice_client).status_code == 200
    body = {"q": "receipt", "mode": "lexical"}
    assert alice_api.post("/api/search", body, content_type="application/json").status_code == 200
    refused = alice_api.get("/api/search", {"q": "receipt", "mode": "lexical"})
    assert refused.status_code == 429
    assert_retry_after(refused)
    assert set(refused.json()) == {"detail"}
    assert refused.json()["detail"].startswith(REFUSAL)
    # A query that cannot be searched is refused for what it is (422).
    assert alice_api.get("/api/search", {"q": " "}).status_code == 422
