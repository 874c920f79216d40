"""One reaper for every fenced kind (core.fencing): core's every-minute `job_reap` schedule
reaps ingestion, guides, profiles and Studio outputs, each on its own, and the per-app
schedules are gone."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.operations import RunPython
from django.utils import timezone
from django_q.models import Schedule

from attachments.models import NoteAttachment
from core import fencing
from core.jobs import job_reap
from core.models import Job
from guides.models import Guide
from intelligence.models import SourceProfile
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import upload

pytestmark = pytest.mark.django_db
OLD_REAPERS = {
    "attachments.tasks.reap_stuck_attachments",
    "guides.tasks.reap_stuck_guides",
    "intelligence.tasks.reap_stuck_profiles",
}


def kind(name: str) -> fencing.FencedKind:
    (found,) = [k for k in fencing.registered() if k.name == name]
    return found


def repeating_schedules() -> set[str]:
    return set(Schedule.objects.filter(repeats=-1).values_list("func", flat=True))


def replay_schedule_migrations() -> None:
    """The schedules as the migrations leave them, from none: every RunPython step that writes
    django-q2 schedules, in the order `migrate` runs them. (Migration data cannot be assumed
    present: a transactional test that ran earlier in this process flushed it.)"""
    Schedule.objects.all().delete()
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    for migration, _ in executor.migration_plan(leaves, clean_start=True):
        for operation in migration.operations:
            if isinstance(operation, RunPython) and "Schedule" in inspect.getsource(operation.code):
                code: Any = operation.code
                code(apps, None)


def test_the_migrations_leave_one_reaper_schedule_and_the_reverse_restores_the_old_ones():
    replay_schedule_migrations()
    # Besides core's reaper, only chat's sweep of abandoned answers (not a fenced kind).
    assert repeating_schedules() == {"core.jobs.job_reap", "chat.tasks.interrupt_abandoned_answers"}
    migration = importlib.import_module("core.migrations.0003_one_reaper_schedule")
    migration.create_old_reapers(apps, None)
    assert repeating_schedules() >= OLD_REAPERS
    migration.delete_old_reapers(apps, None)
    assert not OLD_REAPERS & repeating_schedules()
    assert "core.jobs.job_reap" in repeating_schedules()


@pytest.fixture
def note(alice):
    return NoteFactory.create(notebook=NotebookFactory.create(owner=alice))


@pytest.fixture
def stale(settings):
    return timezone.now() - timedelta(seconds=settings.INGEST_STALE_SECONDS + 5)


@pytest.fixture
def ready(alice, note):
    attachment = upload(alice, note, "other.pdf")
    NoteAttachment.objects.filter(pk=attachment.pk).update(status="ready")
    return attachment


def stuck_rows(alice, note, ready, stale) -> tuple[NoteAttachment, Guide, SourceProfile]:
    """One run of each kind that stopped reporting."""
    ingesting = upload(alice, note, "text.pdf")
    NoteAttachment.objects.filter(pk=ingesting.pk).update(
        status="processing", attempts=1, heartbeat_at=stale
    )
    guide = Guide.objects.create(
        kind=Guide.Kind.SOURCE,
        notebook=note.notebook,
        attachment=ready,
        status=Guide.Status.PROCESSING,
        token=4,
        attempts=1,
        heartbeat_at=stale,
    )
    profile = SourceProfile.objects.create(
        attachment=ready, status="processing", token=2, attempts=1, heartbeat_at=stale
    )
    return ingesting, guide, profile


def test_job_reap_reaches_every_registered_kind(alice, note, ready, stale):
    from studio.models import StudioOutput

    assert {kind.name for kind in fencing.registered()} == {
        "ingestion", "guides", "profiles", "studio"
    }  # fmt: skip
    ingesting, guide, profile = stuck_rows(alice, note, ready, stale)
    output = StudioOutput.objects.create(
        notebook=note.notebook, created_by=alice, kind="faq", status="processing", token=3,
        attempts=1, heartbeat_at=stale,
    )  # fmt: skip
    uploads = set(Job.objects.values_list("pk", flat=True))

    assert job_reap() == 4
    for row in (ingesting, guide, profile, output):
        row.refresh_from_db()
        assert row.status == "pending"
    assert ingesting.stage == "queued"
    # Each run is queued again, a token-fenced one with its token.
    queued = {
        (func, tuple(args))
        for func, args in Job.objects.exclude(pk__in=uploads).values_list("func", "args")
    }
    assert queued == {
        ("attachments.tasks.ingest_attachment", (ingesting.pk,)),
        ("guides.tasks.write_guide", (guide.pk, 4)),
        ("intelligence.tasks.build_profile", (profile.pk, 2)),
        ("studio.tasks.write_output", (output.pk, 3)),
    }
    assert job_reap() == 0  # fresh heartbeats now: nothing more to do


def test_a_kind_that_raises_does_not_stop_the_others(
    alice, note, ready, stale, caplog, monkeypatch
):
    def explode(cutoff):
        raise RuntimeError("the database of this kind is on fire")

    broken = fencing.FencedKind(
        name="broken", stale=explode, fail_error="never", enqueue=lambda row: None
    )
    # Reaped first, before every real kind.
    monkeypatch.setattr(fencing, "_kinds", {"broken": broken, **fencing._kinds})
    ingesting, guide, profile = stuck_rows(alice, note, ready, stale)
    with caplog.at_level(logging.ERROR, logger="core.fencing"):
        assert job_reap() == 3
    assert "the broken reaper failed" in caplog.text
    assert "on fire" in caplog.text
    for row in (ingesting, guide, profile):
        row.refresh_from_db()
        assert row.status == "pending"


def test_a_lost_source_guide_waits_for_its_pdf_and_a_delayed_one_for_its_time(
    alice, note, ready, stale
):
    processing = upload(alice, note, "text.pdf")
    NoteAttachment.objects.filter(pk=processing.pk).update(status="processing")
    waiting = Guide.objects.create(
        kind=Guide.Kind.SOURCE, notebook=note.notebook, attachment=processing, requested_at=stale
    )
    lost = Guide.objects.create(
        kind=Guide.Kind.SOURCE, notebook=note.notebook, attachment=ready, requested_at=stale
    )
    delayed = Guide.objects.create(
        kind=Guide.Kind.NOTEBOOK,
        notebook=note.notebook,
        requested_at=stale,
        not_before=timezone.now() + timedelta(minutes=5),
    )

    assert fencing.reap(kind("guides")) == 1
    assert Guide.objects.get(pk=lost.pk).heartbeat_at is not None
    assert Guide.objects.get(pk=waiting.pk).heartbeat_at is None  # its PDF's hook queues it
    assert Guide.objects.get(pk=delayed.pk).heartbeat_at is None  # its own ticket is due later
    (job,) = Job.objects.filter(func="guides.tasks.write_guide")  # none for the others
    assert job.args == [lost.pk, lost.token]


def test_a_stuck_run_is_failed_after_its_attempts_and_a_superseded_one_left_alone(
    alice, note, ready, stale, settings
):
    ingesting, guide, profile = stuck_rows(alice, note, ready, stale)
    NoteAttachment.objects.filter(pk=ingesting.pk).update(attempts=settings.INGEST_MAX_ATTEMPTS)
    Guide.objects.filter(pk=guide.pk).update(attempts=settings.INGEST_MAX_ATTEMPTS)
    # A newer request bumps the profile's token after the reaper has read the row.
    read = list(kind("profiles").stale(timezone.now()))
    SourceProfile.objects.filter(pk=profile.pk).update(token=3)
    profiles = dataclasses.replace(kind("profiles"), stale=lambda cutoff: read)

    assert fencing.reap(kind("ingestion")) == 1
    assert fencing.reap(kind("guides")) == 1
    assert fencing.reap(profiles) == 0
    ingesting.refresh_from_db()
    guide.refresh_from_db()
    profile.refresh_from_db()
    assert (ingesting.status, guide.status) == ("failed", "failed")
    assert "stopped 3 times" in ingesting.error
    assert "stopped 3 times" in guide.error
    assert (profile.status, profile.token) == ("processing", 3)  # the newer request's
