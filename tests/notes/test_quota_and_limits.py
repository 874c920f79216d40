"""Notes and text sources count toward the storage quota, and writes that queue background
work (a note created or its text changed, an answer saved to a note, a source reprocessed)
are rate-limited like uploads: 429 with Retry-After on the page and in the API, nothing
written."""

from __future__ import annotations

import pytest
from django.core.cache import caches
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from attachments.models import NoteAttachment
from chat.models import Conversation, Message
from core.models import Job
from core.quota import storage_used
from notes.models import Note
from notes.services import note_create, note_update
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import upload

pytestmark = pytest.mark.django_db
NOTE_REFUSAL = "You are saving notes too fast (at most 2 an hour). Try again in"
REPROCESS_REFUSAL = "You are reprocessing sources too fast (at most 1 an hour). Try again in"


@pytest.fixture(autouse=True)
def _tight_limits(settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "note": "2/h", "reprocess": "1/h"}
    yield
    caches["ratelimit"].clear()


@pytest.fixture(autouse=True)
def _long_notes(settings):
    settings.NOTE_BODY_MAX_CHARS = 2_000_000  # notes that fill a 1 MB quota


@pytest.fixture
def notebook(alice):
    return NotebookFactory.create(owner=alice)


# --- The quota counts notes


def test_notes_count_toward_the_quota_and_one_past_it_is_refused(alice, bob, notebook, settings):
    settings.USER_QUOTA_MB = 1
    note_create(notebook=notebook, author=alice, title="Big", body="x" * 700_000)
    assert storage_used(user_id=alice.pk) == 700_003
    with pytest.raises(ValidationError) as refused:
        note_create(notebook=notebook, author=alice, title="Bigger", body="é" * 200_000)
    assert refused.value.code == "quota"
    assert "does not fit in your storage" in refused.value.messages[0]
    assert Note.objects.filter(author=alice).count() == 1  # nothing written
    assert not Job.objects.filter(args=[Note.objects.count() + 1]).exists()
    # Bob's storage is his own.
    note_create(notebook=NotebookFactory.create(owner=bob), author=bob, body="y" * 700_000)


def test_an_edit_counts_what_it_adds_and_a_shorter_text_always_saves(alice, notebook, settings):
    settings.USER_QUOTA_MB = 1
    note = note_create(notebook=notebook, author=alice, title="t", body="x" * 600_000)
    note_update(note=note, body="x" * 1_000_000)  # grows by 400 KB: fits
    with pytest.raises(ValidationError):
        note_update(note=note, body="x" * 1_100_000)
    assert len(Note.objects.get(pk=note.pk).body) == 1_000_000
    settings.USER_QUOTA_MB = 0  # over quota (an administrator lowered it): shrinking still works
    note_update(note=note, body="short")
    assert Note.objects.get(pk=note.pk).body == "short"


def test_pdfs_and_notes_share_one_quota(alice, notebook, settings):
    note = NoteFactory.create(notebook=notebook, author=alice, body="")
    pdf = upload(alice, note, "text.pdf")
    settings.USER_QUOTA_MB = 1
    room = 1024 * 1024 - pdf.size - len(note.title.encode())
    with pytest.raises(ValidationError):
        note_create(notebook=notebook, author=alice, title="", body="x" * room)
    note_update(note=note, body="x" * (room - 100))
    with pytest.raises(ValidationError) as refused:
        upload(alice, NoteFactory.create(notebook=notebook, author=alice), "text.pdf")
    assert refused.value.code == "quota"


def test_a_text_file_that_does_not_fit_is_refused_on_the_page(
    alice, alice_client, notebook, settings
):
    settings.USER_QUOTA_MB = 1
    note_create(notebook=notebook, author=alice, body="x" * 1_000_000)
    text = SimpleUploadedFile("log.md", b"# Log\n" + b"y" * 100_000, "text/markdown")
    response = alice_client.post(
        reverse("attachments:notebook_upload", args=[notebook.pk]),
        {"files": [text]},
        headers={"HX-Request": "true"},
    )
    assert response.status_code < 500
    assert "does not fit in your storage" in response.content.decode()
    assert not Note.objects.filter(title="log").exists()


# --- Rate limits on writes that queue work


def test_creating_notes_beyond_the_limit_is_refused_on_the_page_and_in_the_api(
    alice, alice_client, alice_api, notebook
):
    assert (
        alice_client.post(f"/notebooks/{notebook.pk}/notes/new/", {"title": "a"}).status_code == 302
    )
    response = alice_api.post(
        f"/api/notebooks/{notebook.pk}/notes", {"title": "b"}, content_type="application/json"
    )
    assert response.status_code == 201
    page = alice_client.post(f"/notebooks/{notebook.pk}/notes/new/", {"title": "c"})
    assert page.status_code == 429
    assert int(page["Retry-After"]) > 0
    assert NOTE_REFUSAL in page.content.decode()
    api = alice_api.post(
        f"/api/notebooks/{notebook.pk}/notes", {"title": "d"}, content_type="application/json"
    )
    assert api.status_code == 429
    assert api.json()["detail"].startswith(NOTE_REFUSAL)
    assert int(api["Retry-After"]) > 0
    assert sorted(Note.objects.values_list("title", flat=True)) == ["a", "b"]


def test_saves_that_change_the_text_spend_the_budget_and_others_do_not(
    alice, alice_client, alice_api, notebook
):
    note = NoteFactory.create(notebook=notebook, author=alice, title="t", body="one")
    url = f"/notes/{note.pk}/edit/"
    for _ in range(3):  # saving the same text again indexes nothing: free
        assert alice_client.post(url, {"title": "t", "body": "one"}).status_code == 302
    assert alice_client.post(url, {"title": "t", "body": "two"}).status_code == 302
    response = alice_api.patch(
        f"/api/notes/{note.pk}", {"body": "three"}, content_type="application/json"
    )
    assert response.status_code == 200
    page = alice_client.post(url, {"title": "t", "body": "four"})
    assert page.status_code == 429
    assert NOTE_REFUSAL in page.content.decode()
    assert "four" in page.content.decode()  # the text is kept in the form, not lost
    api = alice_api.patch(
        f"/api/notes/{note.pk}", {"body": "five"}, content_type="application/json"
    )
    assert api.status_code == 429
    assert Note.objects.get(pk=note.pk).body == "three"


def test_saving_an_answer_to_a_note_spends_the_note_budget(alice, alice_client, notebook):
    conversation = Conversation.objects.create(owner=alice, notebook=notebook, title="c")
    question = Message.objects.create(conversation=conversation, role="user", content="Why?")
    answer = Message.objects.create(
        conversation=conversation,
        role="assistant",
        content="Because.",
        reply_to=question,
        status=Message.Status.COMPLETE,
    )
    url = f"/chats/messages/{answer.pk}/save/"
    htmx = {"HX-Request": "true"}
    assert alice_client.post(url, headers=htmx).status_code == 200
    assert alice_client.post(url, headers=htmx).status_code == 200
    refused = alice_client.post(url, headers=htmx)
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert NOTE_REFUSAL in refused.content.decode()
    assert Note.objects.filter(notebook=notebook).count() == 2


def test_reprocessing_beyond_the_limit_is_refused_on_the_page_and_in_the_api(
    alice, alice_client, alice_api, notebook
):
    note = NoteFactory.create(notebook=notebook, author=alice)
    pdf = upload(alice, note, "text.pdf")
    NoteAttachment.objects.filter(pk=pdf.pk).update(status=NoteAttachment.Status.READY)
    url = f"/attachments/{pdf.pk}/reprocess/"
    assert alice_client.post(url, headers={"HX-Request": "true"}).status_code == 200
    NoteAttachment.objects.filter(pk=pdf.pk).update(status=NoteAttachment.Status.READY)
    queued = Job.objects.filter(func="attachments.tasks.ingest_attachment").count()

    row = alice_client.post(url, headers={"HX-Request": "true"})
    assert row.status_code == 429
    assert REPROCESS_REFUSAL in row.content.decode()
    page = alice_client.post(url)
    assert page.status_code == 429
    assert int(page["Retry-After"]) > 0
    api = alice_api.post(f"/api/attachments/{pdf.pk}/reprocess")
    assert api.status_code == 429
    assert api.json()["detail"].startswith(REPROCESS_REFUSAL)
    assert NoteAttachment.objects.get(pk=pdf.pk).status == NoteAttachment.Status.READY
    assert Job.objects.filter(func="attachments.tasks.ingest_attachment").count() == queued
