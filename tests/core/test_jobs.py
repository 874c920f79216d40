"""Background jobs take turns per user (core.jobs): one user's backlog never stands between
another user and the next free worker, whatever kinds of jobs fill it."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import OrmQ, Schedule

from attachments.models import NoteAttachment
from core.jobs import job_claim, job_reap, job_run_next
from core.models import Job
from notes.models import Note
from notes.services import note_create
from tests.factories import NotebookFactory, NoteFactory, UserFactory
from tests.fixtures.documents import upload
from tests.fixtures.waiting import wait_until
from tests.workers import run_worker

pytestmark = pytest.mark.django_db
State = Job.State
CALLS: list[tuple[object, ...]] = []


def record(*args: object) -> None:
    """A task function for these tests: remembers that it ran."""
    CALLS.append(args)


def explode(*args: object) -> None:
    raise RuntimeError("the task failed")


def claimed(hint: int | None = None) -> int | None:
    """The id of the job a ticket would take now (and takes)."""
    taken = job_claim(hint)
    return taken.pk if taken else None


def job(user, state=State.PENDING, **fields) -> Job:
    return Job.objects.create(user=user, func="tests.core.test_jobs.record", state=state, **fields)


def test_the_user_with_fewer_jobs_running_goes_first(alice, bob):
    job(alice, State.RUNNING, started_at=timezone.now())
    first, second = job(alice), job(alice)
    bobs = job(bob)  # queued last

    assert claimed(first.pk) == bobs.pk  # the ticket of alice's job runs bob's
    # Now both have one running: alice's last start is older than bob's, so alice's turn.
    assert claimed(bobs.pk) == first.pk
    assert claimed() == second.pk
    assert claimed() is None  # nothing left: a ticket with nothing to do returns


def test_users_take_turns_by_when_they_were_last_served(alice, bob):
    carol = UserFactory.create(username="carol")
    now = timezone.now()
    job(alice, State.DONE, started_at=now - timedelta(minutes=1), finished_at=now)
    job(bob, State.DONE, started_at=now - timedelta(hours=1), finished_at=now)
    alices, bobs, carols = job(alice), job(bob), job(carol)
    # Carol never had a job run, bob's ran an hour ago, alice's a minute ago.
    assert [claimed() for _ in range(3)] == [carols.pk, bobs.pk, alices.pk]


def test_a_delayed_job_waits_for_its_time(alice):
    later = job(alice, not_before=timezone.now() + timedelta(minutes=1))
    assert claimed(later.pk) is None
    Job.objects.filter(pk=later.pk).update(not_before=timezone.now())
    assert claimed(later.pk) == later.pk


def test_a_ticket_runs_the_fairest_job_and_records_how_it_ended(alice, bob):
    CALLS.clear()
    job(alice, State.RUNNING, started_at=timezone.now())
    alices = Job.objects.create(user=alice, func="tests.core.test_jobs.record", args=[1, "a"])
    bobs = Job.objects.create(user=bob, func="tests.core.test_jobs.record", args=[2, "b"])

    assert job_run_next(alices.pk) == bobs.pk
    assert CALLS == [(2, "b")]
    bobs.refresh_from_db()
    assert (bobs.state, bobs.attempts) == (State.DONE, 1)
    assert bobs.finished_at is not None


def test_a_failed_job_is_retried_while_it_has_attempts_then_fails(alice):
    failing = Job.objects.create(user=alice, func="tests.core.test_jobs.explode", max_attempts=2)
    job_run_next(failing.pk)
    failing.refresh_from_db()
    assert (failing.state, failing.attempts) == (State.PENDING, 1)
    assert failing.not_before is not None
    assert failing.not_before > timezone.now()  # after a backoff, on a ticket of its own
    assert Schedule.objects.filter(func="core.jobs.job_run_next", args=f"({failing.pk},)")

    Job.objects.filter(pk=failing.pk).update(not_before=timezone.now())
    job_run_next(failing.pk)
    failing.refresh_from_db()
    assert (failing.state, failing.attempts) == (State.FAILED, 2)
    assert "the task failed" in failing.error


def test_jobs_are_queued_with_the_transaction_that_asked_for_them(
    alice, django_capture_on_commit_callbacks
):
    notebook = NotebookFactory.create(owner=alice)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        note = note_create(notebook=notebook, author=alice, title="t", body="words")
    (queued,) = Job.objects.filter(func="notes.tasks.embed_note")
    assert (queued.user_id, queued.args, queued.state) == (alice.pk, [note.pk], State.PENDING)
    assert not OrmQ.objects.exists()  # the ticket goes out on commit
    for callback in callbacks:
        callback()
    (ticket,) = OrmQ.objects.all()
    assert (ticket.func(), ticket.task["args"]) == ("core.jobs.job_run_next", (queued.pk,))


def test_the_reaper_retries_or_fails_lost_runs_and_sends_missing_tickets(alice, settings):
    lost_at = timezone.now() - timedelta(seconds=settings.Q_CLUSTER["timeout"] + 120)
    retried = job(alice, State.RUNNING, started_at=lost_at, attempts=1, max_attempts=3)
    given_up = job(alice, State.RUNNING, started_at=lost_at, attempts=1, max_attempts=1)
    running = job(alice, State.RUNNING, started_at=timezone.now(), attempts=1)
    # Queued long ago, its ticket lost (a broker that was down, a flushed Redis).
    orphan = job(alice, created_at=timezone.now() - timedelta(minutes=5))
    old_done = job(alice, State.DONE, finished_at=timezone.now() - timedelta(hours=2))

    job_reap()

    states = dict(Job.objects.values_list("pk", "state"))
    assert states[retried.pk] == State.PENDING
    assert states[given_up.pk] == State.FAILED
    assert states[running.pk] == State.RUNNING
    assert old_done.pk not in states  # finished jobs are forgotten after an hour
    # The retried run gets a ticket at once; the orphan, pending for minutes with no ticket
    # in the broker, gets one too.
    assert sorted(t.task["args"][0] for t in OrmQ.objects.all()) == sorted([orphan.pk, retried.pk])
    job_reap()  # the tickets are there now: none more
    assert OrmQ.objects.count() == 2


def big_text(n: int) -> str:
    """About 27 KB of distinct sentences: a note that takes its worker a few seconds."""
    return " ".join(
        f"Entry {n}.{i} records that sample {i * 7 % 101} of batch {n} measured {i * 13 % 997} "
        f"units after {i % 17} hours at station {i % 23}."
        for i in range(300)
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_another_users_file_next_whatever_one_user_queued(alice, bob):
    """Alice saves five long notes in a row (each queues indexing work), then Bob uploads a
    PDF; one worker. First in, first out, Bob's file would wait for all five notes; taking
    turns, it runs right after the note the worker took first."""
    notebook = NotebookFactory.create(owner=alice)
    alices = [
        note_create(notebook=notebook, author=alice, title=f"Log {n}", body=big_text(n))
        for n in range(5)
    ]
    bobs = upload(
        bob, NoteFactory.create(author=bob, notebook=NotebookFactory.create(owner=bob)), "text.pdf"
    )

    def embedded() -> int:
        return (
            Note.objects.filter(pk__in=[n.pk for n in alices]).exclude(embedding_model="").count()
        )

    with run_worker() as worker:
        deadline = time.monotonic() + 300

        def bob_ready() -> bool:
            worker.check_alive()
            return NoteAttachment.objects.get(pk=bobs.pk).status == NoteAttachment.Status.READY

        wait_until(
            bob_ready, 300, message=lambda: NoteAttachment.objects.get(pk=bobs.pk).status
        )  # fmt: skip
        done_before_bob = embedded()

        def alice_done() -> bool:  # and alice's work is all done, on the same worker
            worker.check_alive()
            return embedded() >= len(alices)

        wait_until(
            alice_done, deadline - time.monotonic(), interval=0.2, message=lambda: str(embedded())
        )  # fmt: skip
    # One note was running (or about to) when bob's file arrived; at most one more started
    # while bob's file was being read.
    assert done_before_bob <= 2, done_before_bob
    starts = list(Job.objects.order_by("started_at").values_list("user_id", "func"))
    assert starts[1] == (bob.pk, "attachments.tasks.ingest_attachment"), starts


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_long_audio_overview_lets_another_users_work_through(alice, bob):
    """One worker; Alice's audio overview is spoken line by line by a slow speech server (a
    second a line). It is spoken in slices, each a job of its own, so Bob's timeline, asked
    for once her speech has started, is written while her overview is still being spoken."""
    from attachments.services import attachment_ingest
    from studio import services as studio
    from studio.models import StudioOutput
    from tests.fake_speech import fake_speech_server

    files = []
    for user in (alice, bob):
        notebook = NotebookFactory.create(owner=user)
        note = NoteFactory.create(author=user, notebook=notebook)
        files.append(upload(user, note, "text.pdf"))
        attachment_ingest(attachment_id=files[-1].pk)
    Job.objects.all().delete()  # what ingestion asked for (guides, profiles)
    alices, bobs_book = files[0].note.notebook, files[1].note.notebook
    with fake_speech_server() as speaker:
        speaker.hang = 1.0
        with run_worker(
            SPEECH_MODEL="fake-tts",
            SPEECH_BASE_URL=speaker.url,
            STUDIO_SPEECH_SLICE_SECONDS="1",
            CHAT_MODEL="",
        ) as worker:
            overview = studio.output_create(user=alice, notebook_id=alices.pk, kind="audio")

            def speaking() -> bool:
                worker.check_alive()
                return len(speaker.requests) >= 1

            wait_until(speaking, 120, message="the overview was never spoken")
            timeline = studio.output_create(user=bob, notebook_id=bobs_book.pk, kind="timeline")

            def bobs_done() -> bool:
                worker.check_alive()
                timeline.refresh_from_db()
                return not timeline.is_active

            wait_until(bobs_done, 120, message=lambda: worker.tail())
            overview.refresh_from_db()
            spoken_then = len(speaker.requests)
            assert overview.status == StudioOutput.Status.PROCESSING  # still being spoken

            def alices_done() -> bool:
                worker.check_alive()
                overview.refresh_from_db()
                return not overview.is_active

            wait_until(alices_done, 300, message=lambda: worker.tail())
    assert timeline.status in ("ready", "failed"), timeline.error
    assert overview.status == "ready", overview.error
    assert spoken_then < len(audio_lines := overview.content["sections"][0]["items"])
    assert len(speaker.requests) == len(audio_lines)
