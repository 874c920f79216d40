"""What a user's searches may cost: searches per user (SEARCH_RATE_LIMIT, page and API
together) answer 429 with when to come back, shown where the results go; the model calls they
make (expansion, rerank of passages and of whole documents) draw on the user's model-call
budget (MODEL_CALL_BUDGET), and a search beyond it goes without the model and says so."""

from __future__ import annotations

import pytest
from django.core.cache import caches
from django.test import Client

from core.breakers import breaker
from tests.factories import NotebookFactory, NoteFactory
from tests.fake_chat import Metadata, fake_chat_server
from tests.fixtures.search import EXPANDING, RECEIPT_EN, Model, make_attachment, profile, system_of

pytestmark = pytest.mark.django_db
REFUSAL = "You are searching too fast (at most 2 searches an hour). Try again in"
HTMX = {"HX-Request": "true"}
BUDGET_NOTE = "Model budget used up: these results are ranked without the model until"


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
    """A receipt each for alice and bob, and for alice an invoice and a report; each profiled
    (for whole-document search)."""
    notes = {}
    for user in (alice, bob):
        notes[user] = note = NoteFactory.create(notebook=NotebookFactory.create(owner=user))
        receipt = make_attachment(note, ["Grocery receipt from the supermarket: milk, bread."],
                                  config="english")  # fmt: skip
        profile(receipt, "receipt", "Rema 1000 grocery receipt", {"merchant": "Rema 1000"})
    for text, kind in (("Invoice 2024-17 for groceries delivered.", "invoice"),
                       ("Annual report on grocery prices.", "other")):  # fmt: skip
        attachment = make_attachment(notes[alice], [text], config="english")
        profile(attachment, kind, text[:20], {})


@pytest.fixture
def fake(settings):
    """The chat model, counting every request it gets."""
    from core import breakers, rerank

    rerank.reset_state()  # the cached OpenAI client points at the previous server
    breakers.reset_all()
    with fake_chat_server() as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        settings.RERANKER_TIMEOUT = 2
        yield server
    rerank.reset_state()


def assert_breakers_closed() -> None:
    for name in ("llm", "reranker"):
        assert (breaker(name).state, breaker(name).failures) == ("closed", 0)


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


# --- The model-call budget ---------------------------------------------------------------------


def test_expanded_searches_beyond_the_budget_go_without_the_model_and_say_so(
    settings, fake, alice_client, alice_api, bob_client, shelf
):
    settings.MODEL_CALL_BUDGET = "3/h"
    Model(fake)
    pages = [search_page(alice_client, "grocery receipt") for _ in range(4)]
    assert [page.status_code for page in pages] == [200] * 4
    assert len(fake.bodies) == 3  # one expansion each for the first three
    assert BUDGET_NOTE not in pages[2].content.decode()
    last = pages[3].content.decode()
    assert 'id="search-model-budget"' in last
    assert BUDGET_NOTE in last
    assert "milk" in last  # searched as written
    body = alice_api.get("/api/search", {"q": "grocery receipt", "mode": "lexical"}).json()
    assert body["info"]["model_budget"]["used_up"] is True
    assert 0 < body["info"]["model_budget"]["retry_after"] <= 3600 + 360
    assert body["info"]["expansion"]["fallback"].startswith("your model-call budget is used up")
    assert len(fake.bodies) == 3
    assert_breakers_closed()

    bobs = search_page(bob_client, "grocery receipt").content.decode()
    assert len(fake.bodies) == 4  # bob's budget is his own
    assert BUDGET_NOTE not in bobs


def test_whole_document_searches_make_no_more_model_calls_than_the_budget(
    settings, fake, alice_client, alice_api, shelf
):
    settings.MODEL_CALL_BUDGET = "6/h"
    Model(fake)  # an expansion, and a relevancy for each of alice's three documents
    answers = [
        alice_api.get("/api/search", {"q": "grocery receipt", "mode": "documents"})
        for _ in range(10)
    ]
    assert [answer.status_code for answer in answers] == [200] * 10
    # The first: an expansion and three rerank calls (charged four: a tie-break may follow);
    # the second: an expansion, and its rerank does not fit; then none.
    assert len(fake.bodies) == 5
    first, last = answers[0].json(), answers[-1].json()
    assert first["info"]["rerank"]["fallback"] is None
    assert "model_budget" not in first["info"]
    assert last["info"]["rerank"]["fallback"] == "model-call budget used up"
    assert last["info"]["model_budget"]["used_up"] is True
    assert len(last["documents"]) == 3  # in the fused order
    assert all(document["rerank"] is None for document in last["documents"])
    page = alice_client.get("/search/", {"q": "grocery receipt", "mode": "documents"})
    assert page.status_code == 200
    assert BUDGET_NOTE in page.content.decode()
    assert len(fake.bodies) == 5
    assert_breakers_closed()


def test_a_passage_rerank_by_the_chat_model_draws_on_the_budget(settings, fake, alice_api, shelf):
    settings.RERANKER = "llm"
    settings.MODEL_CALL_BUDGET = "3/h"

    def model(body):
        expanding = EXPANDING in system_of(body)
        return Metadata(RECEIPT_EN if expanding else {"ranking": [1]})

    fake.respond = model
    query = {"q": "grocery receipt", "mode": "lexical"}
    first = alice_api.get("/api/search", query).json()
    assert first["info"]["rerank"] == {"backend": "llm", "fallback": None}
    assert first["hits"][0]["rerank"] is not None
    second = alice_api.get("/api/search", query).json()  # the expansion fits, the rerank not
    assert len(fake.bodies) == 3
    assert second["info"]["expansion"]["fallback"] is None
    assert second["info"]["rerank"] == {"backend": "llm", "fallback": "model-call budget used up"}
    assert second["hits"]
    assert second["hits"][0]["rerank"] is None
    assert second["info"]["model_budget"]["used_up"] is True
    assert_breakers_closed()
