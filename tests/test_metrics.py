"""`/metrics`: Prometheus' text format for staff and the metrics token (404 for anyone else),
fed by every process of the machine (prometheus-client's multiprocess mode): requests by URL
pattern, ingestion stages, search legs, chat-model requests and tokens, fallbacks, circuit
breakers and open WebSockets. Each test reads the page before and after doing the real thing
and compares."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connection
from django.test import AsyncClient, Client
from prometheus_client.parser import text_string_to_metric_families

from chat.services import conversation_create
from core.breakers import breaker
from notebook.asgi import application
from notebook.database import database_url
from search.retrieval import search
from tests.factories import NotebookFactory, NoteFactory, UserFactory
from tests.fake_chat import fake_chat_server
from tests.fake_openai import fake_openai_server
from tests.fixtures.documents import ingest, upload

pytestmark = pytest.mark.django_db
TOKEN = "metrics-token-0123456789abcdef"


@pytest.fixture
def staff_client(db) -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="operator", is_staff=True))
    return client


@pytest.fixture
def embeddings(settings):
    """Remote embeddings from a local fake: the real pipeline, without a CPU-bound model."""
    with fake_openai_server(dims=384) as server:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_BASE_URL = server.url
        settings.EMBEDDING_MODEL = "fake-embed"
        yield server


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: Client) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value (0 when absent), or with no labels given the sum over all of them."""
    if labels:
        return samples.get((name, frozenset(labels.items())), 0.0)
    return sum(v for (n, _), v in samples.items() if n == name)


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(key)[label] for (n, key), _ in samples.items() if n == name and label in dict(key)}


# --- Who may read it


@pytest.mark.parametrize("method", ["get", "post", "head"])
def test_anonymous_users_normal_users_and_wrong_tokens_get_404(method, alice_client, settings):
    settings.METRICS_TOKEN = TOKEN
    for client in (
        Client(),
        alice_client,
        Client(headers={"Authorization": "Bearer wrong-token"}),
        Client(headers={"Authorization": f"Basic {TOKEN}"}),
        Client(headers={"Authorization": f"Bearer {TOKEN}x"}),
    ):
        response = getattr(client, method)("/metrics")
        assert response.status_code == 404, (client, response.status_code)
        assert b"notebook_" not in response.content


def test_without_a_metrics_token_no_token_opens_it(settings):
    settings.METRICS_TOKEN = ""
    for header in ("Bearer ", "Bearer", "Bearer  "):
        assert Client(headers={"Authorization": header}).get("/metrics").status_code == 404


def test_an_inactive_staff_account_gets_404(db):
    client = Client()
    user = UserFactory.create(is_staff=True)
    client.force_login(user)
    user.is_active = False
    user.save()
    assert client.get("/metrics").status_code == 404


def test_staff_and_the_token_read_prometheus_text(staff_client, settings):
    settings.METRICS_TOKEN = TOKEN
    for client in (staff_client, Client(headers={"Authorization": f"Bearer {TOKEN}"})):
        response = client.get("/metrics")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain; version=0.0.4")
        assert scrape(client) is not None  # parses as the text format
    assert staff_client.post("/metrics").status_code == 405


# --- What it counts


def test_requests_are_counted_by_url_pattern_method_and_status(staff_client, alice_client, alice):
    notebook = NotebookFactory.create(owner=alice)
    note = NoteFactory.create(notebook=notebook, author=alice)
    name = "notebook_http_request_duration_seconds_count"
    route = "notes/<int:note_id>/"
    before = scrape(staff_client)
    assert alice_client.get(f"/notes/{note.pk}/").status_code == 200
    assert alice_client.get(f"/notes/{note.pk + 1000}/").status_code == 404
    after = scrape(staff_client)
    ok = {"route": route, "method": "GET", "status": "2xx"}
    missing = {"route": route, "method": "GET", "status": "4xx"}
    assert value(after, name, **ok) == value(before, name, **ok) + 1
    assert value(after, name, **missing) == value(before, name, **missing) + 1
    # Labels name patterns, never paths: no id of anyone's object.
    routes = label_values(after, name, "route")
    assert route in routes
    assert not any(str(note.pk) in r for r in routes)


@pytest.mark.django_db(transaction=True)
def test_requests_through_the_asgi_handler_are_counted(alice):
    """As under daphne: Django's AsyncClient goes through the ASGI handler."""
    staff = Client()
    staff.force_login(UserFactory.create(username="operator", is_staff=True))
    client = AsyncClient()
    async_to_sync(client.aforce_login)(alice)
    name = "notebook_http_request_duration_seconds_count"
    route = {"route": "settings/", "method": "GET", "status": "2xx"}
    before = value(scrape(staff), name, **route)
    assert async_to_sync(client.get)("/settings/").status_code == 200
    assert value(scrape(staff), name, **route) == before + 1


def test_ingestion_stages_and_a_search_per_leg_are_recorded(staff_client, alice, embeddings):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), author=alice)
    stages = "notebook_ingestion_stage_duration_seconds_count"
    runs = "notebook_ingestion_runs_total"
    legs = "notebook_search_duration_seconds_count"
    before = scrape(staff_client)

    attachment = ingest(upload(alice, note, "text.pdf"))  # the worker's code, in this process
    assert attachment.status == "ready", attachment.error
    search(user=alice, query="kingfisher weir", mode="hybrid")

    after = scrape(staff_client)
    for stage in ("extract", "ocr", "chunk", "embed", "thumbnail"):
        assert value(after, stages, stage=stage) == value(before, stages, stage=stage) + 1, stage
    assert value(after, runs, outcome="ready") == value(before, runs, outcome="ready") + 1
    seconds = "notebook_ingestion_stage_duration_seconds_sum"
    assert value(after, seconds, stage="embed") > value(before, seconds, stage="embed")
    for leg in ("lexical", "embed_query", "vector", "fuse", "total"):
        assert value(after, legs, mode="hybrid", leg=leg) == (
            value(before, legs, mode="hybrid", leg=leg) + 1
        ), leg


def test_a_keyword_only_search_counts_a_fallback(staff_client, alice, settings, embeddings):
    settings.EMBEDDING_BASE_URL = "http://127.0.0.1:9/v1"  # nothing listens: the leg fails
    settings.EMBEDDING_QUERY_TIMEOUT = 5
    name = "notebook_fallbacks_total"
    before = scrape(staff_client)
    result = search(user=alice, query="anything at all", mode="hybrid")
    assert result.degraded_reason
    after = scrape(staff_client)
    assert value(after, name, kind="vector_leg") == value(before, name, kind="vector_leg") + 1


def test_circuit_breaker_openings_and_rejections_are_counted(staff_client, settings):
    settings.RERANKER_BREAKER_FAILURES = 2
    opens, rejections = "notebook_breaker_opens_total", "notebook_breaker_rejections_total"
    before = scrape(staff_client)
    circuit = breaker("reranker")
    assert not circuit.failure()
    assert circuit.failure()  # the second in a row opens it
    assert not circuit.allow()
    assert not circuit.allow()
    after = scrape(staff_client)
    assert value(after, opens, breaker="reranker") == value(before, opens, breaker="reranker") + 1
    assert value(after, rejections, breaker="reranker") == (
        value(before, rejections, breaker="reranker") + 2
    )


def test_chat_model_requests_are_timed_and_their_tokens_counted(staff_client, settings):
    from chat.llm.server import stream_chat
    from chat.reformulation import _SYSTEM, _ModelReformulation
    from core.llm import client, forget_servers, structured_call

    forget_servers()
    seconds, tokens = "notebook_llm_request_duration_seconds_count", "notebook_llm_tokens_total"
    with fake_chat_server() as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        before = scrape(staff_client)
        api = client(settings.OPENAI_BASE_URL, "test-key", 30.0, 2)
        messages = [{"role": "user", "content": "Say something."}]
        with stream_chat(
            api, model="fake-model", messages=messages, stream=True,
            stream_options={"include_usage": True},
        ) as stream:  # fmt: skip
            chunks = list(stream)
        assert chunks
        reply = structured_call(
            name="reformulation", system=_SYSTEM, user="And then?", model=_ModelReformulation
        )
        assert reply is not None
        after = scrape(staff_client)
    forget_servers()
    (prompt, completion), (prompt2, completion2) = server.usage_sent
    for purpose, used in (
        ("answer", (prompt, completion)),
        ("reformulation", (prompt2, completion2)),
    ):
        ok = {"purpose": purpose, "outcome": "ok"}
        assert value(after, seconds, **ok) == value(before, seconds, **ok) + 1, purpose
        for kind, n in zip(("prompt", "completion"), used, strict=True):
            label = {"purpose": purpose, "kind": kind}
            assert value(after, tokens, **label) == value(before, tokens, **label) + n


def test_a_failing_chat_model_counts_errors_and_the_offline_answer(staff_client, settings):
    from chat.agent import get_answerer
    from chat.reformulation import _ModelReformulation
    from core.llm import structured_call

    settings.CHAT_MODEL = "fake-model"
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"  # nothing listens
    settings.LLM_BREAKER_FAILURES = 1
    seconds, fallbacks = "notebook_llm_request_duration_seconds_count", "notebook_fallbacks_total"
    error = {"purpose": "reformulation", "outcome": "error"}
    before = scrape(staff_client)
    assert (
        structured_call(
            name="reformulation", system="Rewrite.", user="And then?", model=_ModelReformulation
        )
        is None
    )
    assert get_answerer().name != "llm"  # the breaker is open: the offline answerer
    after = scrape(staff_client)
    assert value(after, seconds, **error) == value(before, seconds, **error) + 1
    offline = {"kind": "answer_offline"}
    assert value(after, fallbacks, **offline) == value(before, fallbacks, **offline) + 1
    assert value(after, "notebook_breaker_opens_total", breaker="llm") == (
        value(before, "notebook_breaker_opens_total", breaker="llm") + 1
    )


def _session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    client.get("/")
    return "; ".join(f"{k}={v.value}" for k, v in client.cookies.items()).encode()


@pytest.mark.django_db(transaction=True)  # Channels closes connections around each query
def test_open_websockets_move_the_gauge(alice):
    staff = UserFactory.create(username="operator", is_staff=True)
    staff_client = Client()
    staff_client.force_login(staff)
    conversation = conversation_create(owner=alice, notebook=NotebookFactory.create(owner=alice))
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"),
               (b"cookie", _session_cookie(alice))]  # fmt: skip
    name = "notebook_websocket_connections"

    def open_sockets() -> float:
        return value(scrape(staff_client), name, consumer="chat")

    def communicator(cookie: bytes) -> WebsocketCommunicator:
        return WebsocketCommunicator(
            application, f"/ws/chat/{conversation.pk}/", headers=[*headers[:2], (b"cookie", cookie)]
        )

    async def go() -> list[float]:
        seen = [await sync_to_async(open_sockets)()]
        first, second = communicator(headers[2][1]), communicator(headers[2][1])
        assert (await first.connect(timeout=10))[0]
        assert (await second.connect(timeout=10))[0]
        seen.append(await sync_to_async(open_sockets)())
        await first.disconnect()
        seen.append(await sync_to_async(open_sockets)())
        await second.disconnect()
        seen.append(await sync_to_async(open_sockets)())
        # A refused socket (another user's conversation) is never counted.
        refused = communicator(await sync_to_async(_session_cookie)(staff))
        assert not (await refused.connect(timeout=10))[0]
        await refused.disconnect()
        seen.append(await sync_to_async(open_sockets)())
        return seen

    before, *rest = async_to_sync(go)()
    assert rest == [before + 2, before + 1, before, before]


OTHER_PROCESS = textwrap.dedent(
    """
    import os, django
    django.setup()
    from core import metrics
    metrics.fallback("from_another_process")
    metrics.websocket_connected("other")
    if os.environ.get("KILLED"):
        os._exit(0)  # no clean exit: as if killed
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("killed", [False, True])
def test_samples_of_other_processes_are_aggregated(staff_client, killed):
    """A second process (as a worker or another web process is) writes into the same
    directory; /metrics adds its counters to ours, and forgets its open connections once it
    has ended, cleanly or not."""
    name = "notebook_fallbacks_total"
    before = value(scrape(staff_client), name, kind="from_another_process")
    ours = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    env = {
        **{k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"},
        # As `make run` does: the directory is DATA_DIR/metrics, set by settings.
        "DATA_DIR": str(ours.parent),
        "DJANGO_SETTINGS_MODULE": "notebook.settings",
        "DATABASE_URL": database_url(connection.settings_dict),
        **({"KILLED": "1"} if killed else {}),
    }
    for _ in range(2):
        subprocess.run(
            [sys.executable, "-c", OTHER_PROCESS], cwd=settings.BASE_DIR, env=env, check=True
        )
    after = scrape(staff_client)
    assert value(after, name, kind="from_another_process") == before + 2
    assert value(after, "notebook_websocket_connections", consumer="other") == 0


def test_serve_forgets_only_processes_that_are_gone(tmp_path, monkeypatch):
    """`serve` starting on a machine clears the samples of dead processes, never those of a
    process still writing (a test run, a worker started on its own)."""
    from core import metrics

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for name in (f"counter_{gone}.db", f"counter_{os.getpid()}.db", "histogram_x.db"):
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setattr(metrics, "metrics_dir", lambda: tmp_path)
    metrics.reset_directory()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"counter_{os.getpid()}.db",
        "histogram_x.db",
    ]
