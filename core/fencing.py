"""Fenced background work: the state row some kinds keep beside their job, and one reaper.

Three kinds of background work keep a row of their own besides their `core.models.Job`: a
file's ingestion (`NoteAttachment`), a guide (`Guide`) and a source profile (`SourceProfile`).
Each row has a `status` (pending → processing → ready | failed), `attempts` (runs started),
`heartbeat_at` (the running run's last sign of life) and, for the kinds a newer request can
supersede while a run is on its way, a `token`. A run claims its row by a conditional UPDATE
and writes only while the row is still its own (its token, or its attempt), so a run may be
lost (its worker killed, its job's ticket lost) but never overwrites a newer one.

What every kind needs besides, and what lives here, is the reaper. A kind describes itself in
a `FencedKind` and registers it in its AppConfig.ready(); `core.jobs.job_reap` (every minute)
reaps every registered kind (`reap_all`), each on its own: one kind raising is logged and the
others are reaped all the same.

- A run silent for INGEST_STALE_SECONDS (the kind's `stale` rows) is requeued (status pending,
  a fresh heartbeat, the kind's `requeue` fields, its run queued again) or, once it has been
  started INGEST_MAX_ATTEMPTS times, failed with the kind's message (then its `on_fail`).
- A pending row whose run was never queued or got lost (the kind's `lost` rows) gets a fresh
  heartbeat and its run queued again.

Each change is a conditional UPDATE on what the reaper read: the row's status, and its token
(a token-fenced kind) or, for a stale run of a kind without one, its attempts; so a run that
reported meanwhile, or a newer request, wins. This module imports no app: the kinds tell it
what they are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

logger = logging.getLogger(__name__)

# The status values the reaper sets (each kind's own Status choices hold them).
PENDING = "pending"
FAILED = "failed"


@dataclass(frozen=True)
class FencedKind:
    """One kind of fenced work, as the reaper sees it. Rows are model instances of the kind."""

    # Names the kind in the logs and in the registry.
    name: str
    # Rows whose run stopped reporting, given the cutoff (now - INGEST_STALE_SECONDS).
    stale: Callable[[datetime], Iterable[Any]]
    # The error of a row given up on; `{attempts}` is replaced by its number of runs.
    fail_error: str
    # Queue a run of the row (the kind's own job_submit, with its token when it has one).
    enqueue: Callable[[Any], object]
    # Pending rows whose run was lost, given the cutoff. None: `stale` covers them.
    lost: Callable[[datetime], Iterable[Any]] | None = None
    # Fields a requeue sets besides status (pending) and heartbeat_at (now).
    requeue: Mapping[str, object] = field(default_factory=dict)
    # Fenced by a `token` (bumped by every new request) rather than by `attempts`.
    token_fenced: bool = False
    # Called with each row given up on, after the update (e.g. remove a working copy).
    on_fail: Callable[[Any], object] | None = None


_kinds: dict[str, FencedKind] = {}


def register(kind: FencedKind) -> None:
    """Reap `kind` with every `core.jobs.job_reap` (idempotent by its name)."""
    _kinds[kind.name] = kind


def registered() -> list[FencedKind]:
    return list(_kinds.values())


def queue_safely(enqueue: Callable[..., object], *args: object, what: str) -> None:
    """Queue a run without ever failing what asked for it (an upload, a delete, the reaper's
    next row): a row whose run could not be queued stays pending, and the reaper queues it
    again once it is older than INGEST_STALE_SECONDS."""
    try:
        enqueue(*args)
    except Exception:
        logger.exception("could not queue %s %s", what, args)


def _fenced(kind: FencedKind, row: Any, *, by_attempts: bool) -> QuerySet[Any]:
    """The row, only while it is still as the reaper read it."""
    fence: dict[str, object] = {"pk": row.pk, "status": row.status}
    if kind.token_fenced:
        fence["token"] = row.token
    elif by_attempts:
        fence["attempts"] = row.attempts
    rows: QuerySet[Any] = type(row)._default_manager.filter(**fence)
    return rows


def reap(kind: FencedKind) -> int:
    """Requeue or fail the kind's rows whose run stopped reporting, requeue its lost pending
    rows (module docstring). Returns how many rows it changed."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.INGEST_STALE_SECONDS)
    touched = 0
    for row in kind.stale(cutoff):
        rows = _fenced(kind, row, by_attempts=True)
        if row.attempts >= settings.INGEST_MAX_ATTEMPTS:
            error = kind.fail_error.format(attempts=row.attempts)
            touched += rows.update(status=FAILED, error=error)
            if kind.on_fail is not None:
                kind.on_fail(row)
        elif rows.update(status=PENDING, heartbeat_at=now, **kind.requeue):
            touched += 1
            kind.enqueue(row)
    if kind.lost is not None:
        for row in kind.lost(cutoff):
            if _fenced(kind, row, by_attempts=False).update(heartbeat_at=now):
                touched += 1
                kind.enqueue(row)
    if touched:
        logger.warning("%s reaper touched %s row(s)", kind.name, touched)
    return touched


def reap_all() -> int:
    """Reap every registered kind; one that raises is logged and does not stop the others.
    Returns how many rows they changed."""
    touched = 0
    for kind in registered():
        try:
            touched += reap(kind)
        except Exception:
            logger.exception(
                "the %s reaper failed; the other kinds are reaped all the same", kind.name
            )
    return touched
