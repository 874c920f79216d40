"""Search in any language: query expansion and translation by the chat model, per-candidate
rerank with bounded concurrency and one tie-break, fallbacks, the doc-type filter and the
document-level search mode (search.expansion, search.doc_rerank, search.documents)."""

from __future__ import annotations

import pytest

from search.doc_rerank import Candidate, rerank_documents
from search.expansion import expand
from tests.factories import NotebookFactory, NoteFactory
from tests.fake_chat import Hang, Metadata, Status
from tests.fixtures.search import (
    DOC_ID,
    Model,
    make_attachment,
    profile,
    user_of,
)


@pytest.fixture
def offline(settings):
    settings.CHAT_MODEL = ""


def candidates(n: int) -> list[Candidate]:
    return [Candidate(str(100 + i), f"Type: receipt\nName: shop {i}") for i in range(n)]


# --- Expansion


def test_expansion_returns_the_english_fields(fake):
    Model(fake)
    expansion = expand("kvittering for dagligvarer")
    assert (expansion.language, expansion.english, expansion.doc_type) == (
        "no", "grocery receipt", "receipt")  # fmt: skip
    assert expansion.queries == ["grocery receipt", "grocery receipt supermarket food shopping"]
    assert expansion.fallback == ""
    (body,) = fake.bodies
    assert body["temperature"] == 0
    assert "kvittering for dagligvarer" in user_of(body)


@pytest.mark.parametrize(
    ("turn", "reason"),
    [
        (Metadata("no JSON here"), "not JSON"),
        (Metadata({"language": "no", "docType": "boarding pass"}), "JSON does not match"),
        (Status(429), "HTTP 429"),
        (Hang(5), "timeout"),
    ],
)
def test_a_failed_expansion_searches_as_written(fake, settings, turn, reason):
    settings.CHAT_TIMEOUT = 1
    Model(fake, expansion=turn)
    expansion = expand("kvittering")
    assert expansion.queries == []
    assert expansion.reason == reason
    assert "searched as written" in str(expansion.as_info()["fallback"])


def test_expansion_goes_through_the_chat_models_breaker(fake, settings, breaker_clock):
    """Expansion failures count towards the chat model's breaker; while it is open a search
    sends nothing and goes as written (not waiting out a timeout per search), the chat path
    sees it open too, and after the cooldown one reply closes it."""
    from chat.llm.server import model_available
    from core.breakers import breaker

    settings.CHAT_TIMEOUT = 1
    settings.LLM_BREAKER_FAILURES = 2
    settings.LLM_BREAKER_SECONDS = 1
    model = Model(fake, expansion=Hang(5))
    assert [expand("kvittering").reason for _ in range(2)] == ["timeout", "timeout"]
    assert breaker("llm").state == "open"
    assert not model_available()
    sent = len(model.calls("expansion"))
    skipped = expand("kvittering")
    assert (skipped.reason, skipped.queries) == ("circuit open", [])
    assert len(model.calls("expansion")) == sent  # nothing was sent

    breaker_clock.advance(1.1)  # the cooldown: the next call is the trial
    Model(fake)
    assert expand("kvittering for dagligvarer").english == "grocery receipt"
    assert breaker("llm").state == "closed"


def test_offline_the_query_is_searched_as_written(offline):
    expansion = expand("kvittering for dagligvarer")
    assert expansion.queries == []
    assert expansion.backend == "none"
    assert "translation needs a chat model" in expansion.fallback


# --- Per-candidate rerank


def test_rerank_runs_with_at_most_rerank_concurrency_requests_in_flight(fake, settings):
    settings.RERANK_CONCURRENCY = 3
    model = Model(fake, relevancy={"105": 0.95, "107": 0.2}, delay=0.15)
    outcome = rerank_documents("grocery receipt", candidates(12))
    assert outcome.fallback is None
    assert len(model.calls("rerank")) == 12  # one call per candidate
    assert fake.max_in_flight == 3  # bounded, and the bound is reached (they do overlap)
    assert outcome.max_in_flight == 3
    assert outcome.order is not None
    assert outcome.scores is not None
    assert outcome.order[0] == "105"  # the best relevancy first
    assert outcome.order[-1] == "107"
    assert outcome.scores["105"] == pytest.approx(0.95)
    # Each call carries the original query and the candidate's data.
    assert "Query: grocery receipt" in user_of(model.calls("rerank")[0])
    assert "Type: receipt" in user_of(model.calls("rerank")[0])


def test_the_default_concurrency_is_ten(fake, settings):
    assert settings.RERANK_CONCURRENCY == 10
    Model(fake, delay=0.1)
    outcome = rerank_documents("q", candidates(25))
    # The client never has more than 10 requests open; the server really saw several at once.
    # Its own count may show one more: it counts a request out only after writing the reply,
    # and the client may already have sent the next one on receiving it.
    assert 2 <= outcome.max_in_flight <= 10
    assert 2 <= fake.max_in_flight <= 11


def test_a_tie_among_the_best_triggers_exactly_one_tie_break(fake):
    model = Model(fake, relevancy={"101": 0.99, "103": 1.0, "104": 0.995}, order=["104", "101"])
    outcome = rerank_documents("q", candidates(6))
    assert len(model.calls("tie-break")) == 1
    tie = user_of(model.calls("tie-break")[0])
    assert set(DOC_ID.findall(tie)) == {"101", "103", "104"}
    # The model's order, then the tied one it left out, then the rest by relevancy.
    assert outcome.order is not None
    assert outcome.order[:3] == ["104", "101", "103"]
    assert outcome.tie_break == {"ids": ["103", "104", "101"], "fallback": None}
    assert outcome.calls == 7


def test_one_top_candidate_needs_no_tie_break(fake):
    model = Model(fake, relevancy={"101": 1.0, "102": 0.98})
    outcome = rerank_documents("q", candidates(4))
    assert model.calls("tie-break") == []
    assert outcome.tie_break is None
    assert outcome.order is not None
    assert outcome.order[:2] == ["101", "102"]


def test_a_failed_tie_break_keeps_the_tied_order(fake):
    model = Model(fake, relevancy={"101": 1.0, "102": 1.0})
    model.order = ["nonsense"]
    outcome = rerank_documents("q", candidates(3))
    assert outcome.order is not None
    assert outcome.tie_break is not None
    assert outcome.order[:2] == ["101", "102"]
    assert outcome.tie_break["fallback"] == "no known docId in the order"


@pytest.mark.parametrize(
    ("turn", "reason"),
    [
        (Metadata("I think it is quite relevant"), "not JSON"),
        (Metadata({"docId": "102", "relevancy": 7}), "JSON does not match"),
        (Metadata({"docId": "999", "relevancy": 0.9}), "wrong docId"),
        (Status(429), "HTTP 429"),
        (Hang(5), "timeout"),
    ],
)
def test_junk_timeouts_and_429s_keep_the_fused_order(fake, settings, turn, reason):
    settings.RERANKER_TIMEOUT = 1
    Model(fake, relevancy={"102": turn, "103": 1.0})
    outcome = rerank_documents("q", candidates(5))
    assert outcome.order is None  # the caller keeps the fused order
    assert reason in str(outcome.fallback)
    assert outcome.failures["102"] == reason


def test_without_a_chat_model_nothing_is_reranked(offline):
    outcome = rerank_documents("q", candidates(3))
    assert (outcome.backend, outcome.order, outcome.scores) == ("none", None, None)


# --- Passages: the query as written and its English forms, fused


@pytest.fixture
def shelf(alice, bob):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice, title="Papers"))
    receipt = make_attachment(
        note, ["Grocery receipt from the supermarket: milk, bread."], config="english"
    )
    other = make_attachment(note, ["Annual report on river ecology."], config="english")
    bobs = NoteFactory.create(notebook=NotebookFactory.create(owner=bob, title="Bob's"))
    bob_receipt = make_attachment(bobs, ["Grocery receipt of bob, secret."], config="english")
    return {"receipt": receipt, "other": other, "bob_receipt": bob_receipt, "note": note}


@pytest.mark.django_db
def test_the_english_queries_are_searched_and_found(fake, alice_api, shelf):
    Model(fake)
    body = alice_api.get(
        "/api/search", {"q": "kvittering for dagligvarer", "mode": "lexical"}
    ).json()
    assert [hit["attachment_id"] for hit in body["hits"]] == [shelf["receipt"].pk]
    assert body["info"]["expansion"]["englishQuery"] == "grocery receipt"
    assert body["info"]["queries"] == [
        "grocery receipt", "grocery receipt supermarket food shopping"]  # fmt: skip
    assert body["info"]["doc_type"] == {"value": "receipt", "source": "inferred"}
    assert set(body["info"]["stages"]) == {"expansion", "search", "rerank"}
    assert "expansion" in body["timings_ms"]
    assert "of bob" not in str(body)


@pytest.mark.django_db
def test_expansion_can_be_turned_off(fake, alice_api, shelf):
    Model(fake)
    body = alice_api.get(
        "/api/search", {"q": "kvittering for dagligvarer", "mode": "lexical", "expand": "false"}
    ).json()
    assert body["hits"] == []
    assert fake.bodies == []


@pytest.mark.django_db
def test_offline_the_page_says_translation_needs_a_chat_model(offline, alice_client, shelf):
    page = alice_client.get("/search/", {"q": "kvittering", "mode": "lexical"}).content.decode()
    assert 'id="search-expansion-note"' in page
    assert "translation needs a chat model" in page
    api = alice_client.get("/api/search", {"q": "kvittering", "mode": "lexical"}).json()
    assert api["info"]["expansion"]["backend"] == "none"


@pytest.mark.django_db
def test_the_page_shows_the_english_query_and_stage_timings(fake, alice_client, shelf):
    Model(fake)
    page = alice_client.get(
        "/search/", {"q": "kvittering for dagligvarer", "mode": "lexical"}
    ).content.decode()
    assert 'id="search-english"' in page
    assert "grocery receipt" in page
    assert 'id="search-stages"' in page
    assert 'id="search-latency"' in page
    assert 'id="search-expansion-note"' not in page
    assert "of bob" not in page


# --- Whole documents: one hit per source, from the document vector and the best passage


@pytest.fixture
def profiled(shelf, alice):
    receipt_data = {"merchant": "Rema 1000", "total": 231.5, "currency": "NOK"}
    profile(shelf["receipt"], "receipt", "Rema 1000 grocery receipt", receipt_data)
    profile(shelf["other"], "other", "River ecology annual report", {})
    invoice = make_attachment(
        shelf["note"], ["Invoice 2024-17 for consulting services, due in 30 days."],
        config="english")  # fmt: skip
    profile(invoice, "invoice", "Acme consulting invoice", {"invoice_number": "2024-17"})
    # Bob's receipt is the closest match of all; alice must never see it.
    profile(shelf["bob_receipt"], "receipt", "Grocery receipt", {"merchant": "bob's secret shop"})
    return {**shelf, "invoice": invoice}


@pytest.mark.django_db
def test_documents_mode_gives_one_hit_per_source_from_the_users_own(offline, alice_api, profiled):
    body = alice_api.get("/api/search", {"q": "grocery receipt", "mode": "documents"}).json()
    ids = [d["attachment_id"] for d in body["documents"]]
    assert body["hits"] == []
    assert ids[0] == profiled["receipt"].pk
    assert len(ids) == len(set(ids))
    assert profiled["bob_receipt"].pk not in ids
    top = body["documents"][0]
    assert top["doc_type"] == "receipt"
    assert top["better_name"] == "Rema 1000 grocery receipt"
    assert top["suggested_name"].startswith("Receipt-")
    assert top["display_name"] == profiled["receipt"].original_name  # not accepted
    assert top["similarity"] > 0.3
    assert top["rerank"] is None  # offline: no rerank
    assert "secret" not in str(body)


@pytest.mark.django_db
def test_the_document_vector_leg_is_scoped_in_sql(alice, profiled):
    from core.embeddings import get_embedder
    from search.documents import profile_vector
    from search.retrieval import Scope

    (embedding,) = get_embedder().embed(["Grocery receipt bob's secret shop"])
    rows = profile_vector(user=alice, embedding=embedding, scope=Scope(), limit=1)
    # LIMIT 1 after the scope: bob's closer profile cannot take the only slot and be dropped.
    assert [pk for pk, _ in rows] == [profiled["receipt"].pk]


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["documents", "lexical", "hybrid"])
def test_the_doc_type_filter_applies_in_every_mode(offline, alice_api, profiled, mode):
    body = alice_api.get(
        "/api/search", {"q": "receipt invoice", "mode": mode, "doc_type": "invoice"}
    ).json()
    found = [d["attachment_id"] for d in body["documents"]] + [
        h["attachment_id"] for h in body["hits"]]  # fmt: skip
    assert found
    assert set(found) == {profiled["invoice"].pk}
    assert body["info"]["doc_type"] == {"value": "invoice", "source": "user"}


@pytest.mark.django_db
def test_the_users_doc_type_wins_over_the_inferred_one(fake, alice_api, profiled):
    Model(fake, relevancy={})  # expansion infers "receipt"
    body = alice_api.get(
        "/api/search",
        {"q": "kvittering for dagligvarer", "mode": "documents", "doc_type": "invoice"},
    ).json()
    assert body["info"]["expansion"]["docType"] == "receipt"
    assert body["info"]["doc_type"] == {"value": "invoice", "source": "user"}
    assert [d["attachment_id"] for d in body["documents"]] == [profiled["invoice"].pk]


@pytest.mark.django_db
def test_documents_are_reranked_per_candidate_by_the_chat_model(
    fake, settings, alice_api, profiled
):
    settings.RERANK_CONCURRENCY = 2
    receipt, invoice = str(profiled["receipt"].pk), str(profiled["invoice"].pk)
    model = Model(fake, relevancy={receipt: 0.97, invoice: 0.1}, delay=0.1)
    body = alice_api.get(
        "/api/search", {"q": "kvittering for dagligvarer", "mode": "documents"}
    ).json()
    top = body["documents"][0]
    assert top["attachment_id"] == profiled["receipt"].pk
    assert top["rerank"] >= 0.9
    rerank = body["info"]["rerank"]
    assert rerank["fallback"] is None
    assert rerank["max_in_flight"] <= 2
    assert fake.max_in_flight <= 2
    # One call per candidate (alice's three documents), each with the original query and the
    # candidate's extracted data; never bob's.
    calls = model.calls("rerank")
    assert len(calls) == 3
    assert all("Query: kvittering for dagligvarer" in user_of(b) for b in calls)
    assert any('"merchant": "Rema 1000"' in user_of(b) for b in calls)
    assert not any("secret" in user_of(b) for b in fake.bodies)
    assert set(body["info"]["stages"]) == {"expansion", "search", "rerank"}
    assert body["timings_ms"]["rerank"] > 0


@pytest.mark.django_db
def test_a_failing_document_rerank_keeps_the_fused_order_with_the_badge(
    fake, alice_client, alice_api, profiled
):
    Model(fake, relevancy={str(profiled["invoice"].pk): Status(429)})
    offline_order = [
        d["attachment_id"]
        for d in alice_api.get(
            "/api/search", {"q": "grocery receipt", "mode": "documents", "rerank": "false"}
        ).json()["documents"]
    ]
    body = alice_api.get("/api/search", {"q": "grocery receipt", "mode": "documents"}).json()
    assert [d["attachment_id"] for d in body["documents"]] == offline_order
    assert "HTTP 429" in body["info"]["rerank"]["fallback"]
    page = alice_client.get(
        "/search/", {"q": "grocery receipt", "mode": "documents"}
    ).content.decode()
    assert 'id="search-rerank-fallback"' in page


@pytest.mark.django_db
def test_the_page_shows_documents_with_name_type_and_scores(fake, alice_client, profiled):
    Model(fake, relevancy={str(profiled["receipt"].pk): 0.96})
    page = alice_client.get(
        "/search/", {"q": "kvittering for dagligvarer", "mode": "documents"}
    ).content.decode()
    assert 'class="card search-hit search-document"' in page
    assert f'src="/attachments/{profiled["receipt"].pk}/thumbnail/"' in page
    # The name opens the full-screen split view (document left, extracted data right).
    receipt = profiled["receipt"]
    title = f'<a class="hit-title" href="/sources/{receipt.pk}/">{receipt.original_name}</a>'
    assert title in page  # the user's file name: the suggested one was not accepted
    assert "Rema 1000 grocery receipt" in page
    assert '<span class="badge doc-type-badge">Receipt</span>' in page
    assert "rerank 0.96" in page
    assert "similarity " in page
    assert 'id="search-rerank-count"' in page
    assert "secret" not in page


@pytest.mark.django_db
def test_the_new_texts_are_translated(offline, alice_client, profiled):
    page = alice_client.get(
        "/search/", {"q": "grocery receipt", "mode": "documents"}, HTTP_ACCEPT_LANGUAGE="de"
    ).content.decode()
    assert "die Übersetzung braucht ein Chat-Modell" in page
    assert "Ganze Dokumente" in page
    assert "Quittungen" in page
    page = alice_client.get(
        "/search/", {"q": "grocery receipt", "mode": "documents"}, HTTP_ACCEPT_LANGUAGE="zh-hans"
    ).content.decode()
    assert "翻译需要聊天模型" in page
    assert "整个文档" in page
