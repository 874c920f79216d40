"""The Studio tests' library: three manuals ingested once (tests/guides/documents.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from django_q.models import OrmQ, Schedule

from attachments import services as attachment_services
from attachments.models import NoteAttachment
from core.models import Job
from notes.models import Note
from notes.services import note_create, notebook_create
from tests.factories import UserFactory
from tests.guides import documents

HISTORY = [
    (
        "1 Early hives",
        [
            "The first movable-frame hive in this valley was built by the miller Tomas Berg in "
            "1852, after he had read about the hives of the Reverend Langstroth in a newspaper.",
            "By 1875 the valley counted more than forty beekeepers, and the first honey market "
            "was held in the square on 14 September 1878.",
        ],
    ),
    (
        "2 The association",
        [
            "The beekeepers' association of the valley was founded on 3 March 1921 by twelve "
            "members, who met in the back room of the inn on the first Monday of every month.",
            "In 1953 a hard winter killed two thirds of the colonies, and the association bought "
            "queens from the south to rebuild the apiaries in the following spring.",
        ],
    ),
]


def ingest(user: User, note: Note, name: str, pages: list[list[documents.Block]]) -> NoteAttachment:
    uploaded = SimpleUploadedFile(name, documents.pdf(pages), "application/pdf")
    attachment = attachment_services.attachment_upload(user=user, note=note, uploaded=uploaded)
    attachment_services.attachment_ingest(attachment_id=attachment.pk)
    attachment.refresh_from_db()
    assert attachment.status == "ready", attachment.error
    return attachment


@pytest.fixture(scope="package")
def library(django_db_setup, django_db_blocker, tmp_path_factory):
    """Alice's notebook with three manuals (two share a licence paragraph), committed once."""
    media = tmp_path_factory.mktemp("m")
    with django_db_blocker.unblock(), override_settings(MEDIA_ROOT=media, CHAT_MODEL=""):
        queued = set(OrmQ.objects.values_list("pk", flat=True))
        schedules = set(Schedule.objects.values_list("pk", flat=True))
        alice = UserFactory.create(username="alice")
        book = notebook_create(owner=alice, title="Hobbies")
        note = note_create(notebook=book, author=alice, title="", body="")
        bees = ingest(alice, note, "bees.pdf", documents.bees())
        sailing = ingest(alice, note, "sailing.pdf", documents.sailing())
        history = ingest(
            alice, note, "history.pdf", documents.manual("Bees in the Valley", HISTORY)
        )
        Job.objects.all().delete()  # the guides and profiles those asked for
        try:
            yield SimpleNamespace(alice=alice, book=book, bees=bees, sailing=sailing,
                                  history=history)  # fmt: skip
        finally:
            User.objects.filter(username="alice").delete()
            OrmQ.objects.exclude(pk__in=queued).delete()
            Schedule.objects.exclude(pk__in=schedules).delete()
