"""Prometheus metrics (prometheus-client in multiprocess mode) and the `/metrics` page.

Every process of one machine (the web processes, the django-q2 workers and their children)
writes its samples to memory-mapped files in one directory, PROMETHEUS_MULTIPROC_DIR
(default `DATA_DIR/metrics`); `/metrics` reads them all, so a scrape of any web process shows
the whole machine: requests served by every web process, ingestion stages run by the workers.
The directory belongs to one machine (a local disk, never shared storage): on several machines
each web process exposes its machine's processes, and a machine that runs only workers
exposes its own with `manage.py metrics_exporter`. `manage.py serve` empties the directory
as it starts (the samples of a previous run would otherwise add up with the new ones).

PROMETHEUS_MULTIPROC_DIR is set by settings, before django-q2 imports prometheus_client: the
library chooses between per-process and shared values as it is imported.

Labels are bounded: a request is labelled by its URL pattern (`notes/<int:note_id>/`), never
by its path; no label ever carries a user's text or an id. Reading the page takes a staff
session or `Authorization: Bearer <METRICS_TOKEN>`; anyone else gets 404.
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.utils.crypto import constant_time_compare


@cache
def metrics_dir() -> Path:
    """PROMETHEUS_MULTIPROC_DIR (settings sets DATA_DIR/metrics unless the environment names
    one; child processes inherit it)."""
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(Path(settings.DATA_DIR) / "metrics"))
    path = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    path.mkdir(parents=True, exist_ok=True)
    return path


@cache
def _metrics() -> Any:
    """The metrics, made at first use: each value's file is opened in the directory the
    environment names then (tests name their own before anything is recorded)."""
    metrics_dir()
    # prometheus_client picks its multiprocess value class when first imported: after
    # metrics_dir() has set PROMETHEUS_MULTIPROC_DIR
    from prometheus_client import Counter, Gauge, Histogram

    return SimpleNamespace(
        request_seconds=Histogram(
            "notebook_http_request_duration_seconds",
            "Time to answer an HTTP request (until the response is returned; a stream's body "
            "is not included), by URL pattern, method and status class.",
            ["route", "method", "status"],
        ),
        ingestion_stage_seconds=Histogram(
            "notebook_ingestion_stage_duration_seconds",
            "Time of one stage of one ingestion run (extract, ocr, chunk, embed, thumbnail, "
            "reuse).",
            ["stage"],
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, float("inf")),
        ),
        ingestion_runs=Counter(
            "notebook_ingestion_runs_total",
            "Ingestion runs (and re-embeddings) by how they ended: ready, failed, "
            "needs_password, pending (retried later).",
            ["outcome"],
        ),
        search_seconds=Histogram(
            "notebook_search_duration_seconds",
            "Time of each leg of a search (lexical, embed_query, vector, expanded_queries, "
            "fuse, rerank; `total` is the whole search), by search mode.",
            ["mode", "leg"],
        ),
        llm_seconds=Histogram(
            "notebook_llm_request_duration_seconds",
            "Time of one chat-model request (a streamed answer until its last chunk), by "
            "purpose and outcome (ok, error).",
            ["purpose", "outcome"],
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, float("inf")),
        ),
        llm_tokens=Counter(
            "notebook_llm_tokens_total",
            "Tokens of chat-model requests as the server counted them (replies without usage "
            "are not counted), by purpose and kind (prompt, completion).",
            ["purpose", "kind"],
        ),
        fallbacks=Counter(
            "notebook_fallbacks_total",
            "Times a degraded path stood in: answer_offline (extractive answerer instead of "
            "the chat model), reformulation_offline, query_expansion, vector_leg "
            "(keyword-only search), rerank and document_rerank (fused order kept), "
            "model_budget (a model call refused: the user's model-call budget is spent).",
            ["kind"],
        ),
        breaker_opens=Counter(
            "notebook_breaker_opens_total",
            "Times a circuit breaker opened (or re-opened after a failed trial).",
            ["breaker"],
        ),
        breaker_rejections=Counter(
            "notebook_breaker_rejections_total",
            "Calls a circuit breaker refused while open.",
            ["breaker"],
        ),
        websockets=Gauge(
            "notebook_websocket_connections",
            "Open WebSocket connections, over the live processes.",
            ["consumer"],
            multiprocess_mode="livesum",
        ),
    )


# --- Recording (one-line calls from where things happen)

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
INGESTION_STAGES = frozenset({"extract", "ocr", "chunk", "embed", "thumbnail", "reuse"})


def observe_ingestion(timings: Mapping[str, Any], *, outcome: object) -> None:
    """A run ended (its row written): the seconds of each stage it ran, and how it ended."""
    for stage, seconds in timings.items():
        if stage in INGESTION_STAGES and isinstance(seconds, int | float):
            _metrics().ingestion_stage_seconds.labels(stage).observe(seconds)
    _metrics().ingestion_runs.labels(str(outcome or "unknown")).inc()


def observe_search(
    timings: Mapping[str, float], total: float, info: Mapping[str, Any], *, mode: str
) -> None:
    """A search ran: each leg's seconds and the whole; a left-out vector leg or a kept fused
    order (reranker failed or skipped) counts as a fallback. ("documents" runs a hybrid
    search first, which counts its own legs and its own fallbacks.)"""
    for leg, seconds in timings.items():
        _metrics().search_seconds.labels(mode, leg.split(":")[0]).observe(seconds)
    _metrics().search_seconds.labels(mode, "total").observe(total)
    if info.get("degraded") and mode != "documents":
        fallback("vector_leg")
    if (info.get("rerank") or {}).get("fallback"):
        fallback("document_rerank" if mode == "documents" else "rerank")


def fallback(kind: str) -> None:
    _metrics().fallbacks.labels(kind).inc()


def breaker_opened(name: str) -> None:
    _metrics().breaker_opens.labels(name).inc()


def breaker_rejected(name: str) -> None:
    _metrics().breaker_rejections.labels(name).inc()


def observe_llm(purpose: str, seconds: float, *, ok: bool, usage: Any = None) -> None:
    """One chat-model request: its time, and its tokens when the server reported them
    (`usage` with prompt_tokens and completion_tokens, an SDK object or None)."""
    _metrics().llm_seconds.labels(purpose, "ok" if ok else "error").observe(seconds)
    if usage is not None:
        tokens = _metrics().llm_tokens
        tokens.labels(purpose, "prompt").inc(getattr(usage, "prompt_tokens", 0) or 0)
        tokens.labels(purpose, "completion").inc(getattr(usage, "completion_tokens", 0) or 0)


def llm_call(purpose: str, create: Callable[..., Any], **request: Any) -> Any:
    """`create(**request)` (a non-streamed `chat.completions.create`), timed and counted;
    errors pass through unchanged."""
    started = time.perf_counter()
    try:
        response = create(**request)
    except BaseException:
        observe_llm(purpose, time.perf_counter() - started, ok=False)
        raise
    observe_llm(purpose, time.perf_counter() - started, ok=True, usage=response_usage(response))
    return response


def response_usage(response: Any) -> Any:
    usage = getattr(response, "usage", None)
    return usage if isinstance(getattr(usage, "prompt_tokens", None), int) else None


def websocket_connected(consumer: str) -> None:
    _metrics().websockets.labels(consumer).inc()


def websocket_disconnected(consumer: str) -> None:
    _metrics().websockets.labels(consumer).dec()


# --- Requests


def _route(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    return match.route if match is not None and match.route else "unmatched"


class RequestMetricsMiddleware:
    """Times each request, labelled by URL pattern (bounded, unlike paths), method and status
    class. First in MIDDLEWARE, so the time includes the other middleware (static files too,
    whose URLs match no pattern: `unmatched`, as do 404s). Synchronous, like the rest of the
    chain (under ASGI, Django runs the whole chain in one thread either way)."""

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        started = time.perf_counter()
        response = self.get_response(request)
        method = request.method if request.method in METHODS else "other"
        status = f"{int(getattr(response, 'status_code', 500)) // 100}xx"
        seconds = time.perf_counter() - started
        _metrics().request_seconds.labels(_route(request), method, status).observe(seconds)
        return response


# --- Processes


def reset_directory() -> None:
    """Forget the processes that are gone (before this machine's processes start; `manage.py
    serve`): their files are removed, so the figures start from zero with the new processes.
    Files of processes still running (another command on the same DATA_DIR, a test run) are
    kept, or their counters would vanish under them."""
    for entry in metrics_dir().glob("*.db"):
        try:
            pid = int(entry.stem.rsplit("_", 1)[1])
        except (IndexError, ValueError):
            continue
        if not _alive(pid):
            entry.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process with that pid
        return True
    return True


def process_ended(pid: int) -> None:
    """Forget a process's open-connection gauge (its counters and histograms stay)."""
    # prometheus_client only after PROMETHEUS_MULTIPROC_DIR is set (see _metrics)
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, str(metrics_dir()))  # type: ignore[no-untyped-call]


def _sweep_dead_processes() -> None:
    """The gauges of processes that died without exiting cleanly (killed): on one machine a
    pid that no longer exists is dead."""
    for entry in metrics_dir().glob("gauge_live*_*.db"):
        pid = int(entry.stem.rsplit("_", 1)[1])
        if not _alive(pid):
            process_ended(pid)


@atexit.register
def _exiting() -> None:
    if _metrics.cache_info().currsize:  # this process recorded something
        process_ended(os.getpid())


def exposition(accept: str = "") -> tuple[bytes, str]:
    """Every process's samples in the directory, and their content type: the format the
    `Accept` header asks for (OpenMetrics or Prometheus text; the text format by default)."""
    # prometheus_client only after PROMETHEUS_MULTIPROC_DIR is set (see _metrics)
    from prometheus_client import CollectorRegistry, multiprocess
    from prometheus_client.exposition import choose_encoder

    _sweep_dead_processes()
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(metrics_dir()))  # type: ignore[no-untyped-call]
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


# --- The page


def may_read(request: HttpRequest) -> bool:
    """Staff (an active staff account's session) or the METRICS_TOKEN bearer token."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_active and user.is_staff:
        return True
    token: str = settings.METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return bool(token) and scheme.lower() == "bearer" and constant_time_compare(given, token)


@login_not_required  # a scraper has no session; everyone not allowed gets 404, not a login page
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus' text format for staff and the metrics token; 404 for everyone else."""
    if not may_read(request):
        raise Http404
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    body, content_type = exposition(request.headers.get("Accept", ""))
    return HttpResponse(body, content_type=content_type)
