"""Per-process circuit breakers for the services a request may wait on: the reranker, the chat
model, the remote embedder. A service that keeps failing is skipped for a while, so requests
degrade at once (fused order, lexical search, the offline answerer) instead of each waiting
out the timeouts and retries of a service that is down.

`breaker(name)` returns the process's breaker of that name; its threshold and cooldown are read
from settings at every call (`<PREFIX>_BREAKER_FAILURES`, `<PREFIX>_BREAKER_SECONDS`), so a
test's settings override applies at once.

Hand-written rather than pybreaker: the state machine is thirty lines, and the one thing we need
that libraries do differently is the single trial call of the half-open state that expires
(a trial whose caller went away must not hold the circuit open forever).
"""

from __future__ import annotations

import logging
import threading
import time
from types import ModuleType
from typing import Literal
from urllib.parse import urlsplit

import openai
from django.conf import settings

logger = logging.getLogger(__name__)

State = Literal["closed", "open", "half-open"]

# Breaker name → prefix of its settings.
SETTINGS_PREFIX = {"reranker": "RERANKER", "llm": "LLM", "embeddings": "EMBEDDING"}


class Breaker:
    """Closed → open after `threshold` failures in a row → after `cooldown` seconds one trial
    call (half-open; concurrent calls still see it open) → closed on success, open again on
    failure. A trial that reports nothing (its caller was abandoned) expires after another
    `cooldown`, and the next call becomes the trial."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._prefix = SETTINGS_PREFIX[name]
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_at: float | None = None  # when the running trial call was let through

    @property
    def threshold(self) -> int:
        return int(getattr(settings, f"{self._prefix}_BREAKER_FAILURES"))

    @property
    def cooldown(self) -> float:
        return float(getattr(settings, f"{self._prefix}_BREAKER_SECONDS"))

    def reset(self) -> None:
        with self._lock:
            self._failures, self._opened_at, self._trial_at = 0, None, None

    @property
    def state(self) -> State:
        """closed: calls go through; half-open: the next call is the trial; open: skip."""
        cooldown = self.cooldown
        with self._lock:
            if self._opened_at is None:
                return "closed"
            return "half-open" if self._trial_due(time.monotonic(), cooldown) else "open"

    @property
    def failures(self) -> int:
        """Failures in a row so far."""
        with self._lock:
            return self._failures

    def retry_in(self) -> float:
        """Seconds until the next trial call may go through (0 when closed or half-open)."""
        cooldown = self.cooldown
        with self._lock:
            if self._opened_at is None:
                return 0.0
            since = self._trial_at if self._trial_at is not None else self._opened_at
            return max(0.0, since + cooldown - time.monotonic())

    def allow(self) -> bool:
        """Whether to call the service now; True in the half-open state claims the trial, and
        the caller must then report `success()` or `failure()`."""
        cooldown = self.cooldown
        with self._lock:
            if self._opened_at is None:
                return True
            now = time.monotonic()
            if not self._trial_due(now, cooldown):
                _metrics().breaker_rejected(self.name)
                return False
            self._trial_at = now
            return True

    def success(self) -> None:
        """The service answered: close the circuit."""
        with self._lock:
            self._failures, self._opened_at, self._trial_at = 0, None, None

    def release(self) -> None:
        """The call ended in a way that says nothing about the service (a bug, an interrupt,
        an abandoned stream): free the trial it may hold, leave everything else."""
        with self._lock:
            if self._trial_at is not None:
                self._trial_at = None

    def failure(self) -> bool:
        """Record a failure; True when it (re)opens the circuit."""
        threshold = self.threshold
        with self._lock:
            self._failures += 1
            if self._trial_at is not None or self._failures >= threshold:
                self._opened_at, self._trial_at = time.monotonic(), None
                _metrics().breaker_opened(self.name)
                return True
            return False

    def _trial_due(self, now: float, cooldown: float) -> bool:
        assert self._opened_at is not None
        if self._trial_at is not None:
            return now - self._trial_at >= cooldown  # the trial's caller never reported back
        return now - self._opened_at >= cooldown


def _metrics() -> ModuleType:
    # Not at import: settings imports this module (through core.rerank), and metrics
    # needs the settings.
    from core import metrics

    return metrics


_breakers: dict[str, Breaker] = {}
_registry_lock = threading.Lock()


def breaker(name: str) -> Breaker:
    """This process's breaker for a service: "reranker", "llm" or "embeddings"."""
    with _registry_lock:
        found = _breakers.get(name)
        if found is None:
            found = _breakers[name] = Breaker(name)
        return found


def reset_all() -> None:
    """Close every breaker and forget its failures (tests; a service known to be back)."""
    with _registry_lock:
        for each in _breakers.values():
            each.reset()


# --- The chat model's breaker ("llm"): every request to the chat model, from chat (answers and
# their helpers, chat.llm) and from every JSON call (core.llm: search's query expansion,
# guides, profiles), reports here.


def llm_outage(exc: BaseException) -> bool:
    """Whether a request's error says the server is down or overloaded: no connection, a
    timeout, 429 or 5xx (after the SDK's own retries). Other 4xx say it refused this request
    (an unsupported parameter, which the callers work around), so the server is up."""

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(exc, openai.APIConnectionError)  # timeouts included


def record_llm(error: BaseException | None) -> None:
    """Tell the "llm" breaker how a request it allowed ended: None for a reply, else its
    error."""

    circuit = breaker("llm")
    if error is None or (isinstance(error, openai.APIStatusError) and not llm_outage(error)):
        circuit.success()
    elif llm_outage(error):
        if circuit.failure():
            host = urlsplit(settings.OPENAI_BASE_URL).netloc or "api.openai.com"
            logger.warning(
                "the language model at %s failed %s times in a row; answering offline for %s s",
                host, circuit.threshold, settings.LLM_BREAKER_SECONDS,
            )  # fmt: skip
    else:
        circuit.release()  # says nothing about the server


def settle_llm(*, answered: bool, error: BaseException | None) -> None:
    """Record a call that may have taken several requests (structured-output levels): any
    reply means the server is up; else its last error decides."""
    if answered or error is not None:
        record_llm(None if answered else error)
    else:
        breaker("llm").release()
