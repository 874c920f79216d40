"""Circuit breakers (core.breakers) and what degrades when a service fails: the remote
embedder against a local /v1/embeddings server (tests/fake_openai.py), search falling back to
its lexical leg, and the chat model against a local chat server (tests/fake_chat.py) until
questions are answered offline."""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.template.loader import render_to_string
from pydantic import BaseModel

from chat.agent import generate, get_answerer
from chat.llm.server import model_available
from chat.models import Message
from chat.rendering import present
from chat.services import conversation_create, message_ask, message_retry
from core import breakers
from core.breakers import breaker, reset_all
from core.embeddings import EmbeddingError, get_embedder
from core.llm import forget_servers, structured_call
from search.retrieval import search
from tests.factories import NotebookFactory, NoteFactory
from tests.fake_chat import (
    Answer,
    BreakMidStream,
    FakeChat,
    Hang,
    Metadata,
    Status,
    fake_chat_server,
)
from tests.fake_openai import fake_openai_server
from tests.fixtures.documents import ingest, upload
from tests.fixtures.search import make_attachment

QUESTION = "What does Lantern do?"  # manual.pdf (tests/samples/) says on page 1


# --- The state machine


class Clock:
    """Stands in for time.monotonic inside core.breakers, so cooldowns pass instantly."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch, settings) -> Clock:
    fake = Clock()
    monkeypatch.setattr(breakers, "time", SimpleNamespace(monotonic=fake))
    settings.LLM_BREAKER_FAILURES = 3
    settings.LLM_BREAKER_SECONDS = 60
    return fake


def state(circuit: breakers.Breaker) -> breakers.State:
    """The circuit's state, read afresh: mypy would keep `circuit.state` narrowed to what an
    earlier assert compared it with, though the calls in between change it."""
    return circuit.state


def test_a_breaker_opens_after_failures_in_a_row_then_lets_one_trial_through(clock):
    circuit = breaker("llm")
    assert state(circuit) == "closed"
    assert circuit.failure() is False
    assert circuit.failure() is False
    assert circuit.allow()  # still closed below the threshold
    assert circuit.failure() is True  # the third in a row opens it
    assert state(circuit) == "open"
    assert not circuit.allow()
    assert circuit.retry_in() == 60

    clock.now += 60
    assert state(circuit) == "half-open"
    assert circuit.allow()  # the trial
    assert not circuit.allow()  # everyone else while the trial runs
    assert state(circuit) == "open"
    circuit.success()
    assert state(circuit) == "closed"
    assert circuit.failures == 0


def test_a_failed_trial_reopens_the_circuit_at_once(clock):
    circuit = breaker("llm")
    for _ in range(3):
        circuit.failure()
    clock.now += 60
    assert circuit.allow()
    assert circuit.failure() is True  # one failure, not three more
    assert circuit.state == "open"
    assert not circuit.allow()
    clock.now += 59
    assert not circuit.allow()
    clock.now += 1
    assert circuit.allow()


def test_a_success_resets_the_count_of_failures_in_a_row(clock):
    circuit = breaker("llm")
    circuit.failure()
    circuit.failure()
    circuit.success()
    circuit.failure()
    circuit.failure()
    assert circuit.state == "closed"
    assert circuit.failure() is True


def test_a_trial_whose_caller_never_reports_expires(clock):
    circuit = breaker("llm")
    for _ in range(3):
        circuit.failure()
    clock.now += 60
    assert circuit.allow()  # a trial whose caller is never heard of again
    clock.now += 59
    assert not circuit.allow()
    clock.now += 1
    assert circuit.allow()  # a new trial


def test_a_released_trial_lets_the_next_call_try(clock):
    circuit = breaker("llm")
    for _ in range(3):
        circuit.failure()
    clock.now += 60
    assert circuit.allow()
    circuit.release()  # the caller went away: nothing learnt about the service
    assert circuit.state == "half-open"
    assert circuit.allow()


def test_threshold_and_cooldown_come_from_settings_at_each_call(clock, settings):
    settings.LLM_BREAKER_FAILURES = 1
    settings.LLM_BREAKER_SECONDS = 5
    circuit = breaker("llm")
    assert circuit.failure() is True
    clock.now += 5
    assert circuit.state == "half-open"


def test_breakers_are_named_per_service_and_reset_together(clock, settings):
    settings.EMBEDDING_BREAKER_FAILURES = 1
    assert breaker("llm") is breaker("llm")
    breaker("embeddings").failure()
    assert breaker("embeddings").state == "open"
    assert breaker("llm").state == "closed"
    with pytest.raises(KeyError):
        breaker("typo")
    reset_all()
    assert breaker("embeddings").state == "closed"


def test_concurrent_failures_are_all_counted(settings):
    settings.LLM_BREAKER_FAILURES = 10_000
    circuit = breaker("llm")
    start = threading.Barrier(8)

    def fail() -> None:
        start.wait()
        for _ in range(500):
            circuit.failure()

    threads = [threading.Thread(target=fail) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert circuit.failures == 4000
    assert circuit.state == "closed"


def test_only_one_of_many_concurrent_callers_gets_the_trial(clock):
    circuit = breaker("llm")
    for _ in range(3):
        circuit.failure()
    clock.now += 60
    start = threading.Barrier(8)
    allowed: list[bool] = []

    def call() -> None:
        start.wait()
        allowed.append(circuit.allow())

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(allowed) == [False] * 7 + [True]


# --- The remote embedder


@pytest.fixture
def remote_embeddings(settings):
    with fake_openai_server(dims=384) as server:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_BASE_URL = server.url
        settings.EMBEDDING_API_KEY = "sk-test"
        settings.EMBEDDING_MODEL = "fake-embed"
        settings.EMBEDDING_BREAKER_FAILURES = 3
        settings.EMBEDDING_BREAKER_SECONDS = 60
        yield server


@pytest.mark.parametrize("status", [500, 503, 429])
def test_the_embedder_fails_fast_once_the_server_failed_in_a_row(remote_embeddings, status):
    remote_embeddings.always = status
    embedder = get_embedder()
    for _ in range(3):
        with pytest.raises(EmbeddingError) as failed:
            embedder.embed(["a passage"])
        assert failed.value.transient
    sent = len(remote_embeddings.requests)
    assert sent == 3 * 5  # the SDK retried each request 4 times before it counted
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match="skipped after 3 failures in a row") as skipped:
        embedder.embed(["a passage"])
    assert skipped.value.transient  # ingestion retries later
    assert time.monotonic() - started < 0.5
    assert len(remote_embeddings.requests) == sent  # the server was left alone


def test_a_hanging_embedding_server_times_out_and_opens_the_circuit(remote_embeddings, settings):
    settings.EMBEDDING_BREAKER_FAILURES = 2
    remote_embeddings.hang = 30
    embedder = get_embedder()
    started = time.monotonic()
    for _ in range(2):
        with pytest.raises(EmbeddingError, match="busy or unreachable"):
            embedder.embed(["a query"], timeout=0.3)  # one attempt, as a search asks
    assert time.monotonic() - started < 5
    assert len(remote_embeddings.requests) == 2
    assert breaker("embeddings").state == "open"


def test_refusals_do_not_open_the_embedding_circuit(remote_embeddings):
    remote_embeddings.always = 401
    embedder = get_embedder()
    for _ in range(5):
        with pytest.raises(EmbeddingError, match="401") as refused:
            embedder.embed(["a passage"])
        assert not refused.value.transient
    assert len(remote_embeddings.requests) == 5  # every one reached the server
    assert breaker("embeddings").state == "closed"


def test_the_embedding_circuit_closes_when_the_server_is_back(
    remote_embeddings, settings, breaker_clock
):
    settings.EMBEDDING_BREAKER_SECONDS = 0.2
    remote_embeddings.always = 503
    embedder = get_embedder()
    for _ in range(3):
        with pytest.raises(EmbeddingError):
            embedder.embed(["a passage"])
    remote_embeddings.always = None
    with pytest.raises(EmbeddingError, match="skipped"):
        embedder.embed(["a passage"])
    breaker_clock.advance(0.3)
    assert len(embedder.embed(["a passage"])) == 1  # the trial
    assert breaker("embeddings").state == "closed"


@pytest.mark.django_db
def test_ingestion_waits_for_an_open_embedding_circuit(alice, remote_embeddings):
    """The open circuit is a transient failure: the file keeps its keyword index and is
    retried later, without a request to the server."""
    remote_embeddings.always = 503
    for _ in range(3):
        with pytest.raises(EmbeddingError):
            get_embedder().embed(["a passage"])
    sent = len(remote_embeddings.requests)
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    attachment = ingest(upload(alice, note, "manual.pdf"))
    assert attachment.status == "pending"
    assert attachment.error.startswith("Will retry in 30 s: Embedding service skipped")
    assert attachment.chunks.exists()
    assert len(remote_embeddings.requests) == sent


# --- Search without its vector leg


@pytest.fixture
def library(alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice, title="Mine"))
    make_attachment(
        note, ["Use sink to divert output to a log file.", "Plots and graphics."], config="english"
    )
    return note


def degraded(info: dict[str, Any]) -> str:
    return str(info.get("degraded", ""))


@pytest.mark.django_db
@pytest.mark.parametrize("status", [500, 429])
def test_a_failing_embedder_leaves_hybrid_search_its_lexical_leg(
    alice, library, remote_embeddings, status
):
    remote_embeddings.always = status
    result = search(user=alice, query="sink output", mode="hybrid")
    assert [hit.text for hit in result.hits] == ["Use sink to divert output to a log file."]
    assert result.hits[0].lexical is not None
    assert result.hits[0].vector is None
    assert degraded(result.info).startswith("vector search unavailable: ")
    assert str(status) in degraded(result.info)
    assert len(remote_embeddings.requests) == 1  # a query gets one attempt, no SDK retries
    assert "vector" not in result.timings


@pytest.mark.django_db
def test_a_hanging_embedder_does_not_hold_the_search_up(
    alice, library, remote_embeddings, settings
):
    settings.EMBEDDING_QUERY_TIMEOUT = 0.3
    remote_embeddings.hang = 30
    started = time.monotonic()
    result = search(user=alice, query="sink output", mode="hybrid")
    assert time.monotonic() - started < 5
    assert len(result.hits) == 1
    assert degraded(result.info).startswith("vector search unavailable: ")


@pytest.mark.django_db
def test_an_open_embedding_circuit_skips_the_vector_leg_without_a_request(
    alice, library, remote_embeddings
):
    remote_embeddings.always = 503
    for _ in range(3):
        search(user=alice, query="sink output", mode="hybrid")
    assert breaker("embeddings").state == "open"
    sent = len(remote_embeddings.requests)
    result = search(user=alice, query="sink output", mode="hybrid")
    assert len(result.hits) == 1
    assert "skipped after 3 failures in a row" in degraded(result.info)
    assert len(remote_embeddings.requests) == sent


@pytest.mark.django_db
def test_vector_only_search_without_embeddings_is_empty_with_the_reason(
    alice, library, remote_embeddings
):
    remote_embeddings.always = 500
    result = search(user=alice, query="sink output", mode="vector")
    assert result.hits == []
    assert degraded(result.info).startswith("vector search unavailable: ")


@pytest.mark.django_db
def test_working_embeddings_leave_no_notice(alice, library, remote_embeddings):
    result = search(user=alice, query="sink output", mode="hybrid")
    assert len(result.hits) == 1
    assert "degraded" not in result.info


@pytest.mark.django_db
def test_the_search_page_and_api_say_vector_search_is_unavailable(
    alice_client, alice_api, library, remote_embeddings
):
    remote_embeddings.always = 503
    page = alice_client.get("/search/", {"q": "sink output", "mode": "hybrid"})
    assert page.status_code == 200
    html = page.content.decode()
    assert "<mark>sink</mark>" in html
    assert 'id="search-degraded"' in html
    assert "Meaning-based search is unavailable right now: these results match your words" in html

    vector_only = alice_client.get("/search/", {"q": "sink output", "mode": "vector"})
    assert vector_only.status_code == 200
    assert "Meaning-based search is unavailable right now." in vector_only.content.decode()

    api = alice_api.get("/api/search", {"q": "sink output", "mode": "hybrid"})
    assert api.status_code == 200
    body = api.json()
    assert len(body["hits"]) == 1
    assert body["info"]["degraded"].startswith("vector search unavailable: ")


@contextmanager
def failing_keyword_queries():
    """The database cancels the BM25 query (as a statement timeout would)."""

    def cancel(execute, sql, params, many, context):
        if "work_mem" in sql:
            raise OperationalError("canceling statement due to statement timeout")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(cancel):
        yield


@pytest.mark.django_db
def test_a_database_error_in_the_keyword_leg_is_shown_not_a_500(alice_client, library):
    with failing_keyword_queries():
        page = alice_client.get("/search/", {"q": "sink output", "mode": "lexical"})
    assert page.status_code == 200
    assert "Search failed: the database did not answer." in page.content.decode()


# --- The chat model


class Verdict(BaseModel):
    ok: bool


@pytest.fixture
def chat(settings):
    """The chat model on a local server, embeddings from a local fake (no CPU-bound model)."""
    forget_servers()
    with fake_openai_server(dims=384) as embeddings, fake_chat_server("friendly") as server:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_BASE_URL = embeddings.url
        settings.EMBEDDING_MODEL = "fake-embed"
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        settings.LLM_BREAKER_FAILURES = 2
        settings.LLM_BREAKER_SECONDS = 60
        yield server
    forget_servers()


@pytest.fixture
def conversation(alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice, title="Tools"))
    attachment = ingest(upload(alice, note, "manual.pdf"))
    assert attachment.status == "ready", attachment.error
    return conversation_create(owner=alice, notebook=note.notebook)


def ask(conversation, question: str = QUESTION) -> Message:
    _, answer = message_ask(conversation=conversation, content=question)
    message = generate(answer.pk, emit=lambda event, data: None)
    assert message is not None
    return message


def down(chat: FakeChat, turn: Any) -> None:
    """Every request gets `turn`, the helper calls' too (the fake routes those apart)."""
    chat.next_turn = lambda body: turn  # type: ignore[method-assign]


def fail_until_open(chat, conversation, turn: Any, *, most: int = 4) -> list[Message]:
    """Ask while every request gets `turn`, until the circuit opens; each answer fails
    with a reason (never stuck streaming)."""
    down(chat, turn)
    failed: list[Message] = []
    while model_available():
        assert len(failed) < most, "the circuit never opened"
        message = ask(conversation)
        assert message.status == Message.Status.ERROR, message.content
        assert message.error
        failed.append(message)
    return failed


@pytest.mark.django_db
@pytest.mark.parametrize(
    "turn",
    [Status(503), Status(429), BreakMidStream(), Hang(30)],
    ids=["503", "429", "broken-stream", "hang"],
)
def test_a_failing_chat_model_opens_the_circuit_and_questions_are_answered_offline(
    chat, conversation, settings, turn
):
    settings.CHAT_TIMEOUT = 0.5
    fail_until_open(chat, conversation, turn)
    assert breaker("llm").state == "open"
    sent = len(chat.requests)

    answerer = get_answerer()
    assert answerer.name == "extractive"
    notice = answerer.notice
    assert "failed 2 times in a row" in notice
    assert "offline answerer" in notice

    message = ask(conversation)
    assert message.status == Message.Status.COMPLETE
    assert message.answerer == "extractive"
    assert message.citations  # quoted from the sources, verified
    assert len(chat.requests) == sent  # the model was not asked


@pytest.mark.django_db
def test_after_the_circuit_opens_retry_says_the_sources_answer_and_offers_to_wait(
    chat, conversation
):
    first, *_, last = fail_until_open(chat, conversation, Status(503))
    html = render_to_string("chat/_message.html", {"item": present(last)})
    assert 'data-testid="model-skipped"' in html
    assert "Retry answers from your sources directly" in html
    assert re.search(r"To have the model answer, wait about \d+ s, until it is tried again", html)
    retried = message_retry(message=last)
    message = generate(retried.pk, emit=lambda event, data: None)
    assert message is not None
    assert message.answerer == "extractive"  # as the notice said
    breaker("llm").reset()  # the model is back: a failed answer's Retry asks it again
    html = render_to_string("chat/_message.html", {"item": present(first)})
    assert "Retry" in html
    assert "model-skipped" not in html


@pytest.mark.django_db
def test_refusals_do_not_open_the_chat_model_circuit(chat, conversation):
    down(chat, Status(401))
    for _ in range(3):
        message = ask(conversation)
        assert message.status == Message.Status.ERROR
        assert "refused the API key" in message.error
    assert breaker("llm").state == "closed"
    assert get_answerer().name == "llm"


@pytest.mark.django_db
def test_the_model_is_tried_again_after_the_cooldown_and_a_success_closes(
    chat, conversation, settings, breaker_clock
):
    settings.LLM_BREAKER_SECONDS = 0.3
    fail_until_open(chat, conversation, Status(503))
    breaker_clock.advance(0.4)
    assert model_available()  # half-open: the next question is the trial
    del chat.next_turn  # the server is back
    message = ask(conversation)
    assert message.status == Message.Status.COMPLETE
    assert message.answerer == "llm"
    assert breaker("llm").state == "closed"


@pytest.mark.django_db
def test_failed_answer_metadata_counts_against_the_model(chat, conversation):
    chat.next_turn = lambda body: (
        FakeChat.next_turn(chat, body) if body.get("stream") else Status(503)
    )
    message = ask(conversation)
    assert message.status == Message.Status.COMPLETE  # the answer stands without metadata
    assert breaker("llm").failures >= 1


def test_structured_calls_give_none_at_once_while_the_circuit_is_open(chat):
    down(chat, Status(503))
    for _ in range(2):
        assert structured_call(name="check", system="Judge.", user="x", model=Verdict) is None
    assert breaker("llm").state == "open"
    sent = len(chat.requests)
    assert structured_call(name="check", system="Judge.", user="x", model=Verdict) is None
    assert len(chat.requests) == sent


def test_a_structured_call_that_falls_back_a_level_is_a_success(chat):
    breaker("llm").failure()
    chat.script = [Status(500, "json_schema unsupported"), Metadata({"ok": True})]
    assert structured_call(name="check", system="Judge.", user="x", model=Verdict) == Verdict(
        ok=True
    )
    assert breaker("llm").failures == 0


def test_a_hanging_helper_call_counts_and_gives_none(chat):
    down(chat, Hang(30))
    started = time.monotonic()
    reply = structured_call(name="check", system="Judge.", user="x", model=Verdict, timeout=0.3)
    assert reply is None
    assert time.monotonic() - started < 5
    assert breaker("llm").failures == 1


def test_answer_streams_complete_normally(chat):
    """The guarded stream is transparent: a whole answer is a success."""
    from chat.llm.server import stream_chat
    from core.llm import client

    breaker("llm").failure()
    chat.script = [Answer("Hello there.")]
    api = client(chat.url + "/v1", "test-key", 5.0, 2)
    with stream_chat(
        api, model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
    ) as stream:
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Hello there."
    assert breaker("llm").failures == 0
