"""Background work, scheduled fairly per user.

django-q2's queue is first in, first out: twenty notes one user saves in a few seconds queue
twenty tasks, and another user's PDF waits behind all of them. So every kind of background
job (ingestion, note indexing, guides, profiles, memories, compaction) is a `Job` row, and
what goes to django-q2 is a *ticket*: `job_run_next`, which runs whichever pending job is
fairest when a worker takes the ticket:

1. the job of the user with the fewest jobs running right now,
2. among equals, of the user whose last job started longest ago (or never),
3. among that user's jobs, the oldest (first in, first out within one user).

One ticket per job, so the work is all done and every worker is used; a user's ticket only
decides *when* something runs, not *what*. A job submitted while others' backlogs fill the
queue starts on the next worker that frees up: no user's backlog delays another user's next
job by more than one job's run time per worker.

Jobs are submitted in the caller's transaction (nothing is queued for work that rolled back)
and their ticket is sent when it commits. A ticket that could not be sent, a worker killed
mid-job, a job past its time: `job_reap` (every minute) sends missing tickets and ends or
retries jobs whose run was lost. The task functions stay idempotent and fenced as before: a
job may, rarely, run twice. The same schedule reaps the kinds that keep a fenced state row of
their own (core.fencing: ingestion, guides, profiles), each on its own.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.brokers import get_broker
from django_q.exceptions import TimeoutException
from django_q.models import Schedule
from django_q.tasks import async_task

from core import fencing
from core.models import Job

logger = logging.getLogger(__name__)
State = Job.State
TICKET = "core.jobs.job_run_next"
# Finished rows kept this long: they tell whose job ran last (rule 2) and show in the admin.
KEEP_FINISHED = timedelta(hours=1)
# A failed job that may run again waits this long times 2^(attempts - 1).
RETRY_DELAY = 30
# A pending job due this long without a ticket in the broker gets one from the reaper.
TICKET_GRACE = timedelta(seconds=60)


def job_submit(
    func: str,
    *args: int | str | bool | None,
    user_id: int | None,
    group: str = "",
    max_attempts: int = 1,
    not_before: datetime | None = None,
) -> Job:
    """Queue `func(*args)` as `user_id`'s work: stored in the current transaction, its ticket
    sent once that commits (at `not_before` for a delayed job). Never raises for the broker:
    a ticket that cannot be sent is sent by the reaper later."""
    job = Job.objects.create(
        user_id=user_id,
        func=func,
        args=list(args),
        group=group[:64],
        max_attempts=max(max_attempts, 1),
        not_before=not_before,
    )
    pk = job.pk
    transaction.on_commit(lambda: _send_ticket(pk, due=not_before))
    return job


def _send_ticket(job_id: int, *, due: datetime | None = None) -> bool:
    """One ticket to django-q2 (a Schedule firing once at `due` for a delayed job)."""
    try:
        if due is not None and due > timezone.now():
            Schedule.objects.create(
                name=f"job {job_id} at {due.isoformat()}",
                func=TICKET,
                args=f"({job_id},)",
                kwargs="{'q_options': {'ack_failure': True}}",
                schedule_type=Schedule.ONCE,
                repeats=1,
                next_run=due,
            )
        else:
            # A failed ticket is never delivered again: the job's own retries are ours.
            async_task(TICKET, job_id, group="jobs", ack_failure=True)
    except Exception:
        logger.exception("could not send the ticket of job %s; the reaper sends it later", job_id)
        return False
    return True


# The fairness rule, in one statement: rows locked by another claim are skipped, so two
# workers never take one job. Users are grouped with NULL (no user) as one more user.
_CLAIM = f"""
WITH per_user AS (
    SELECT user_id,
           count(*) FILTER (WHERE state = '{State.RUNNING}') AS running,
           max(started_at) AS served
    FROM core_job
    GROUP BY user_id
), fairest AS (
    SELECT j.id
    FROM core_job j
    LEFT JOIN per_user u ON u.user_id IS NOT DISTINCT FROM j.user_id
    WHERE j.state = '{State.PENDING}' AND (j.not_before IS NULL OR j.not_before <= %(now)s)
    ORDER BY coalesce(u.running, 0), u.served ASC NULLS FIRST, (j.id = %(hint)s) DESC,
             j.created_at, j.id
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE core_job SET state = '{State.RUNNING}', started_at = %(now)s,
       attempts = core_job.attempts + 1
FROM fairest WHERE core_job.id = fairest.id
RETURNING core_job.id
"""  # noqa: S608 - no user input: the states are our constants


def job_claim(hint: int | None = None) -> Job | None:
    """Take the fairest pending job (module docstring) and mark it running; None when no job
    is waiting. `hint` (the ticket's own job) wins only a tie."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_CLAIM, {"now": timezone.now(), "hint": hint or 0})
        row = cursor.fetchone()
    return Job.objects.get(pk=row[0]) if row else None


def job_run_next(hint: int | str | None = None) -> int | None:
    """django-q2 entry point (a ticket): run the fairest pending job, whichever it is, and
    return its id (None when there was none: its job ran on an earlier ticket)."""
    job = job_claim(int(hint) if hint else None)
    if job is None:
        return None
    if job.pk != (int(hint) if hint else None):
        logger.info("ticket of job %s runs job %s (%s): its turn", hint, job.pk, job.func)
    job_run(job)
    return job.pk


def job_run(job: Job) -> None:
    """Run a claimed job and record how it ended. A job that raised runs again after a
    backoff while it has attempts left (each kind's own fences make a rerun safe)."""
    try:
        import_string(job.func)(*job.args)
    except TimeoutException:
        # django-q2 ends a ticket past TASK_TIMEOUT and replaces its worker process.
        Job.objects.filter(pk=job.pk).update(
            state=State.FAILED,
            finished_at=timezone.now(),
            error=f"Ran longer than {settings.Q_CLUSTER['timeout']} seconds (TASK_TIMEOUT).",
        )
        raise
    except Exception as exc:
        logger.exception("job %s (%s%s) failed", job.pk, job.func, tuple(job.args))
        now = timezone.now()
        if job.attempts < job.max_attempts:
            due = now + timedelta(seconds=RETRY_DELAY * 2 ** (job.attempts - 1))
            Job.objects.filter(pk=job.pk, state=State.RUNNING).update(
                state=State.PENDING, not_before=due, error=repr(exc)[:2000]
            )
            _send_ticket(job.pk, due=due)
        else:
            Job.objects.filter(pk=job.pk).update(
                state=State.FAILED, finished_at=now, error=repr(exc)[:2000]
            )
        return
    Job.objects.filter(pk=job.pk).update(state=State.DONE, finished_at=timezone.now())


def _lost_after() -> timedelta:
    """A job running longer than this lost its worker: django-q2 has killed it (timeout) or
    the worker died. (Its ticket's retry may still bring the ticket back; it then runs the
    fairest job, which is what a requeued job gets anyway.)"""
    return timedelta(seconds=int(settings.Q_CLUSTER["timeout"]) + 60)  # type: ignore[call-overload]


def job_reap() -> int:
    """Periodic (every minute, the one reaper schedule): retry or fail jobs whose run was
    lost, send tickets that are missing, forget finished jobs after KEEP_FINISHED; then reap
    every registered fenced kind (core.fencing.reap_all: one kind raising stops none of the
    others). Returns how many jobs and fenced rows it touched."""
    now = timezone.now()
    touched = _send_missing_tickets(now)  # before the lost runs below send their own
    for job in Job.objects.filter(state=State.RUNNING, started_at__lt=now - _lost_after()):
        rows = Job.objects.filter(pk=job.pk, state=State.RUNNING, attempts=job.attempts)
        if job.attempts < job.max_attempts:
            if rows.update(state=State.PENDING, error="The previous run stopped responding."):
                touched += 1
                _send_ticket(job.pk)
        else:
            touched += rows.update(
                state=State.FAILED,
                finished_at=now,
                error="The run stopped responding (worker killed or out of time).",
            )
    Job.objects.filter(
        state__in=[State.DONE, State.FAILED], finished_at__lt=now - KEEP_FINISHED
    ).delete()
    if touched:
        logger.warning("job reaper touched %s job(s)", touched)
    return touched + fencing.reap_all()


def _send_missing_tickets(now: datetime) -> int:
    """As many tickets as pending due jobs outnumber the tickets waiting in the broker (more
    tickets than jobs is harmless: a ticket with nothing to run returns)."""

    waiting = list(
        Job.objects.filter(state=State.PENDING, created_at__lt=now - TICKET_GRACE)
        .exclude(not_before__gt=now - TICKET_GRACE)
        .order_by("created_at")
        .values_list("pk", flat=True)
    )
    if not waiting:
        return 0
    try:
        queued = get_broker().queue_size()
    except Exception:
        logger.exception("could not read the broker's queue size")
        return 0
    missing = waiting[: max(len(waiting) - int(queued or 0), 0)]
    return sum(_send_ticket(pk) for pk in missing)
