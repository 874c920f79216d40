"""Which pending file an ingestion run takes: uploaders take turns instead of queueing behind
one user's batch, and files waiting out a retry's backoff wait."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from attachments.models import NoteAttachment
from attachments.services.scheduling import claim_fairest
from tests.factories import NotebookFactory, NoteFactory, UserFactory
from tests.fixtures.documents import upload
from tests.fixtures.waiting import wait_until
from tests.workers import run_worker

pytestmark = pytest.mark.django_db
Status = NoteAttachment.Status


def attachment(user, status: str = Status.PENDING, **fields) -> NoteAttachment:
    """A file row as uploading leaves it (no file on disk: claiming never reads it)."""
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=user), author=user)
    return NoteAttachment.objects.create(
        note=note,
        uploaded_by=user,
        file=f"attachments/{note.pk}/x.pdf",
        original_name="x.pdf",
        size=1,
        sha256=f"{note.pk}",
        status=status,
        **fields,
    )


def status_of(*attachments: NoteAttachment) -> list[str]:
    return [NoteAttachment.objects.get(pk=a.pk).status for a in attachments]


def test_an_uploader_with_a_file_running_yields_to_one_without(alice, bob):
    attachment(alice, Status.PROCESSING, heartbeat_at=timezone.now())
    first, second = attachment(alice), attachment(alice)
    bobs = attachment(bob)  # uploaded last

    assert claim_fairest(first.pk) == bobs.pk  # the task of alice's file runs bob's
    bobs.refresh_from_db()
    assert (bobs.status, bobs.attempts) == (Status.PROCESSING, 1)
    assert status_of(first, second) == [Status.PENDING, Status.PENDING]
    # Now both have one running: the oldest waiting file goes next.
    assert claim_fairest(bobs.pk) == first.pk


def test_uploaders_take_turns(alice, bob):
    carol = UserFactory.create(username="carol")
    attachment(alice, Status.READY, heartbeat_at=timezone.now() - timedelta(minutes=1))
    attachment(bob, Status.READY, heartbeat_at=timezone.now() - timedelta(hours=1))
    alices, bobs, carols = attachment(alice), attachment(bob), attachment(carol)

    # Carol never had a file run, bob's ran an hour ago, alice's a minute ago.
    assert claim_fairest(alices.pk) == carols.pk
    NoteAttachment.objects.filter(pk=carols.pk).update(status=Status.READY)
    assert claim_fairest(alices.pk) == bobs.pk
    NoteAttachment.objects.filter(pk=bobs.pk).update(status=Status.READY)
    assert claim_fairest(bobs.pk) == alices.pk
    assert claim_fairest(alices.pk) is None  # nothing left: the task has nothing to do


def test_a_file_waiting_out_its_backoff_is_not_run_early_even_by_its_own_task(alice):
    later = attachment(alice, not_before=timezone.now() + timedelta(minutes=1))
    assert claim_fairest(later.pk) is None
    assert status_of(later) == [Status.PENDING]

    NoteAttachment.objects.filter(pk=later.pk).update(not_before=timezone.now())
    assert claim_fairest(later.pk) == later.pk
    later.refresh_from_db()
    assert (later.status, later.not_before) == (Status.PROCESSING, None)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_does_not_make_one_user_wait_behind_anothers_batch(alice, bob):
    """Alice queues three files, then Bob one; one worker. First in, first out, Bob's would be
    last; taking turns, it is second."""
    alices = [upload(alice, NoteFactory.create(author=alice, notebook=NotebookFactory.create(
        owner=alice)), "text.pdf") for _ in range(3)]  # fmt: skip
    bobs = upload(bob, NoteFactory.create(author=bob, notebook=NotebookFactory.create(owner=bob)),
                  "text.pdf")  # fmt: skip
    everything = [*alices, bobs]
    with run_worker():
        wait_until(
            lambda: not NoteAttachment.objects.filter(pk__in=[a.pk for a in everything])
            .exclude(status=Status.READY)
            .exists(),
            180, interval=0.2, message=lambda: str(status_of(*everything)),
        )  # fmt: skip
    order = list(
        NoteAttachment.objects.filter(pk__in=[a.pk for a in everything])
        .order_by("ready_at")
        .values_list("pk", flat=True)
    )
    assert order == [alices[0].pk, bobs.pk, alices[1].pk, alices[2].pk]
    assert all(a.attempts == 1 for a in NoteAttachment.objects.filter(pk__in=order))
