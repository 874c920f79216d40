"""The notebook workspace through the test client: its three panes, choosing a conversation,
the first question of an empty chat, adding sources by dropping files on the notebook, and
Save to note. Another user's ids answer 404 (tests/test_isolation.py enumerates the routes)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from attachments.models import NoteAttachment
from chat import services
from chat.models import Conversation, Message
from core.markdown import render_markdown
from notes.models import Note
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import sample

pytestmark = pytest.mark.django_db


@pytest.fixture
def notebook(alice):
    return NotebookFactory.create(owner=alice, title="TeX")


@pytest.fixture
def note(alice, notebook):
    return NoteFactory.create(
        notebook=notebook, author=alice, title="URLs in LaTeX", body="# Colons\n\n**Bold** text."
    )


def pdf(name: str, as_name: str | None = None) -> SimpleUploadedFile:
    return SimpleUploadedFile(as_name or name, sample(name), "application/pdf")


def answered(conversation: Conversation, content: str, **fields: Any) -> Message:
    question = Message.objects.create(
        conversation=conversation, role=Message.Role.USER, content="Why do colons not break?"
    )
    defaults: dict[str, Any] = {"status": Message.Status.COMPLETE, "answerer": "extractive"}
    return Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        reply_to=question,
        content=content,
        **{**defaults, **fields},
    )


def cite(n: int, attachment_id: int, **extra: Any) -> dict[str, Any]:
    return {"n": n, "kind": "document", "attachment_id": attachment_id, "file": "text.pdf",
            "page": 3, "chunk_id": 7, "note_id": 1, "note_title": "URLs",
            "quote": "Breaks are not allowed between colons.", **extra}  # fmt: skip


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


# --- the page ---------------------------------------------------------------------------------


def test_the_workspace_shows_sources_by_note_the_chat_and_the_notes(
    alice_client, alice, notebook, note
):
    upload = alice_client.post(
        f"/notebooks/{notebook.pk}/sources/", {"files": [pdf("text.pdf")], "note": note.pk}
    )
    assert upload.status_code == 302
    html = page(alice_client, f"/notebooks/{notebook.pk}/")
    assert 'id="pane-sources"' in html
    assert 'id="pane-chat"' in html
    assert 'id="pane-notes"' in html
    # The PDF under its note, with its live status (it polls itself while queued).
    attachment = NoteAttachment.objects.get()
    assert f'id="source-{attachment.pk}"' in html
    assert f'hx-get="/attachments/{attachment.pk}/source/"' in html
    assert "URLs in LaTeX" in html
    assert "text.pdf" in html
    # Note snippets are plain text, not raw Markdown.
    assert "Colons Bold text." in html
    assert "**Bold**" not in html
    # An empty chat asks straight away.
    assert f'action="/notebooks/{notebook.pk}/ask/"' in html


def test_the_workspace_opens_the_latest_conversation_or_the_one_named(
    alice_client, alice, notebook
):
    older = services.conversation_create(owner=alice, notebook=notebook, title="Older chat")
    answered(older, "About colons.")
    newer = services.conversation_create(owner=alice, notebook=notebook, title="Newer chat")
    answered(newer, "About slashes.")
    html = page(alice_client, f"/notebooks/{notebook.pk}/")
    assert f'ws-connect="/ws/chat/{newer.pk}/"' in html
    assert "About slashes." in html
    html = page(alice_client, f"/notebooks/{notebook.pk}/?c={older.pk}")
    assert f'ws-connect="/ws/chat/{older.pk}/"' in html
    assert "About colons." in html
    assert "About slashes." not in html
    # Both are in the picker.
    assert f"?c={older.pk}" in html
    assert f"?c={newer.pk}" in html


def test_a_conversation_of_another_notebook_or_user_is_not_found(
    alice_client, alice, notebook, bob, bob_notebook
):
    other_notebook = NotebookFactory.create(owner=alice, title="Other")
    elsewhere = services.conversation_create(owner=alice, notebook=other_notebook)
    bobs = services.conversation_create(owner=bob, notebook=bob_notebook)
    for wanted in (elsewhere.pk, bobs.pk, "abc"):
        response = alice_client.get(f"/notebooks/{notebook.pk}/?c={wanted}")
        assert response.status_code == 404


def test_the_first_question_starts_a_conversation_and_an_empty_one_starts_nothing(
    alice_client, alice, notebook, note
):
    refused = alice_client.post(f"/notebooks/{notebook.pk}/ask/", {"content": "   "})
    assert refused.status_code == 400
    assert Conversation.objects.count() == 0
    assert Message.objects.count() == 0
    response = alice_client.post(
        f"/notebooks/{notebook.pk}/ask/", {"content": "What is a colon?", "mode": "research"}
    )
    conversation = Conversation.objects.get()
    answer = conversation.messages.get(role=Message.Role.ASSISTANT)
    assert response.status_code == 302
    assert (
        response["Location"] == f"/notebooks/{notebook.pk}/?c={conversation.pk}#message-{answer.pk}"
    )
    assert conversation.messages.get(role=Message.Role.USER).mode == "research"


def test_asking_from_the_workspace_without_the_socket_comes_back_to_it(
    alice_client, alice, notebook, note
):
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    response = alice_client.post(
        f"/chats/{conversation.pk}/ask/", {"content": "What is a colon?", "from": "workspace"}
    )
    assert response.status_code == 302
    assert response["Location"].startswith(f"/notebooks/{notebook.pk}/?c={conversation.pk}#")
    new = alice_client.post(f"/notebooks/{notebook.pk}/chats/", {"from": "workspace"})
    latest = Conversation.objects.latest("pk")
    assert new["Location"] == f"/notebooks/{notebook.pk}/?c={latest.pk}"


# --- adding sources ---------------------------------------------------------------------------


def test_a_dropped_file_becomes_a_note_titled_after_it(alice_client, notebook):
    response = alice_client.post(
        f"/notebooks/{notebook.pk}/sources/",
        {"files": [pdf("text.pdf", "Breaking_URLs-in-LaTeX.pdf")]},
        headers={"X-Upload": "1"},
    )
    assert response.status_code == 201
    assert response["X-Notebook-Fragment"] == "attachment-rows"
    note = Note.objects.get()
    assert note.title == "Breaking URLs in LaTeX"
    assert note.notebook == notebook
    attachment = note.attachments.get()
    assert attachment.original_name == "Breaking_URLs-in-LaTeX.pdf"
    assert f'id="source-{attachment.pk}"' in response.content.decode()


def test_a_refused_file_leaves_no_empty_note(alice_client, notebook):
    bad = SimpleUploadedFile("notes.pdf", b"not a pdf at all", "application/pdf")
    response = alice_client.post(
        f"/notebooks/{notebook.pk}/sources/", {"files": [bad]}, headers={"X-Upload": "1"}
    )
    assert response.status_code == 400
    assert "notes.pdf" in response.content.decode()
    assert Note.objects.count() == 0
    assert NoteAttachment.objects.count() == 0


def test_the_same_file_twice_names_the_note_that_has_it(alice_client, notebook):
    alice_client.post(f"/notebooks/{notebook.pk}/sources/", {"files": [pdf("text.pdf")]})
    again = alice_client.post(
        f"/notebooks/{notebook.pk}/sources/",
        {"files": [pdf("text.pdf", "copy.pdf")]},
        headers={"X-Upload": "1"},
    )
    assert again.status_code == 409
    assert "already attached to the note “text”" in again.content.decode()
    assert Note.objects.count() == 1


def test_files_go_to_the_chosen_note_of_this_notebook_only(alice_client, alice, notebook, note):
    alice_client.post(
        f"/notebooks/{notebook.pk}/sources/", {"files": [pdf("text.pdf")], "note": note.pk}
    )
    assert note.attachments.count() == 1
    assert Note.objects.count() == 1
    other = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), author=alice)
    response = alice_client.post(
        f"/notebooks/{notebook.pk}/sources/",
        {"files": [pdf("broken.pdf")], "note": other.pk},
        headers={"X-Upload": "1"},
    )
    assert response.status_code == 400
    assert other.attachments.count() == 0


# --- save to note -----------------------------------------------------------------------------


@pytest.fixture
def attachment(alice_client, notebook, note) -> NoteAttachment:
    alice_client.post(
        f"/notebooks/{notebook.pk}/sources/", {"files": [pdf("text.pdf")], "note": note.pk}
    )
    return NoteAttachment.objects.get()


def test_save_to_note_makes_a_note_with_the_answer_and_links_to_its_sources(
    alice_client, alice, notebook, attachment
):
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    answer = answered(
        conversation, "Colons are not break points [1].", citations=[cite(1, attachment.pk)]
    )
    response = alice_client.post(
        f"/chats/messages/{answer.pk}/save/", headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert response["HX-Trigger"] == "notes-changed"
    saved = Note.objects.exclude(pk=attachment.note_id).get()
    assert saved.title == "Why do colons not break?"
    assert saved.notebook == notebook
    assert "Colons are not break points [1]." in saved.body
    html = render_markdown(saved.body)
    assert f'href="/attachments/{attachment.pk}/file/#page=3"' in html
    assert "text.pdf, page 3" in html
    assert "Breaks are not allowed between colons." in html
    assert f'href="/notes/{saved.pk}/"' in response.content.decode()


def test_save_to_note_appends_to_a_chosen_note(alice_client, alice, notebook, note):
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    answer = answered(conversation, "Use the url package.")
    alice_client.post(f"/chats/messages/{answer.pk}/save/", {"note": note.pk})
    note.refresh_from_db()
    assert note.body.startswith("# Colons\n\n**Bold** text.\n\n---\n\n## Why do colons not break?")
    assert "Use the url package." in note.body
    assert Note.objects.count() == 1


def test_a_quote_or_question_from_a_document_stays_text_in_the_saved_note(
    alice_client, alice, notebook, attachment
):
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    hostile = "[click](javascript:alert(1)) <img src=x onerror=alert(1)> **bold**"
    answer = answered(
        conversation, "See [1].", citations=[cite(1, attachment.pk, quote=hostile, file=hostile)]
    )
    question = answer.reply_to
    assert question is not None
    question.content = "# Owned <script>alert(1)</script>"
    question.save()
    alice_client.post(f"/chats/messages/{answer.pk}/save/")
    saved = Note.objects.get(title__startswith="# Owned")
    html = render_markdown(saved.body)
    assert 'href="javascript' not in html
    assert "<img" not in html
    assert "<script" not in html
    assert html.count("<a ") == 1  # the link we wrote, to the PDF page; none from the quote
    assert "<strong>bold</strong>" not in html
    assert "**bold**" in html  # shown as typed


def test_only_a_finished_answer_of_this_notebook_is_saved(alice_client, alice, notebook, note):
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    writing = answered(conversation, "Half an ans", status=Message.Status.STREAMING)
    response = alice_client.post(
        f"/chats/messages/{writing.pk}/save/", headers={"HX-Request": "true"}
    )
    assert response.status_code == 400
    assert "finished answer" in response.content.decode()
    done = answered(conversation, "Whole answer.")
    elsewhere = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), author=alice)
    response = alice_client.post(
        f"/chats/messages/{done.pk}/save/", {"note": elsewhere.pk}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 400
    assert "another notebook" in response.content.decode()
    assert Note.objects.count() == 2  # nothing new
    elsewhere.refresh_from_db()
    assert "Whole answer." not in elsewhere.body


def test_the_save_form_lists_this_notebooks_notes(alice_client, alice, notebook, note):
    NoteFactory.create(notebook=NotebookFactory.create(owner=alice), author=alice, title="Far")
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    answer = answered(conversation, "Use the url package.")
    html = page(alice_client, f"/chats/messages/{answer.pk}/save/form/")
    assert f'value="{note.pk}"' in html
    assert "URLs in LaTeX" in html
    assert "Far" not in html


def test_the_notes_pane_refreshes_on_its_own(alice_client, notebook, note):
    html = page(alice_client, f"/notebooks/{notebook.pk}/notes/")
    assert html.lstrip().startswith('<div id="notes"')
    assert "URLs in LaTeX" in html
