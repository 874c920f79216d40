from __future__ import annotations

import pytest

from notes.models import Note, Notebook
from tests.factories import NotebookFactory, NoteFactory

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


def test_notebook_list_shows_empty_state(alice_client):
    response = alice_client.get("/")
    assert response.status_code == 200
    assert "No notebooks yet." in response.content.decode()


def test_notebook_list_shows_note_counts(alice_client, alice):
    notebook = NotebookFactory.create(owner=alice, title="Reading")
    NoteFactory.create_batch(3, notebook=notebook)
    page = alice_client.get("/").content.decode()
    assert "Reading" in page
    assert "3 notes" in page


def test_create_notebook_without_js_redirects_to_it(alice_client, alice):
    response = alice_client.post("/", {"title": "Thesis", "description": ""})
    notebook = Notebook.objects.get(owner=alice)
    assert response.status_code == 302
    assert response["Location"] == f"/notebooks/{notebook.pk}/"


def test_create_notebook_with_blank_title_shows_error_and_stores_nothing(alice_client):
    response = alice_client.post("/", {"title": "  "}, headers=HTMX)
    assert response.status_code == 200
    assert "This field is required." in response.content.decode()
    assert not Notebook.objects.exists()


def test_rename_notebook_with_htmx_returns_the_row(alice_client, alice):
    notebook = NotebookFactory.create(owner=alice, title="Old")
    form = alice_client.get(f"/notebooks/{notebook.pk}/rename/", headers=HTMX)
    assert "<form" in form.content.decode()
    response = alice_client.post(
        f"/notebooks/{notebook.pk}/rename/", {"title": "New", "description": "d"}, headers=HTMX
    )
    assert response.status_code == 200
    assert f'id="notebook-{notebook.pk}"' in response.content.decode()
    notebook.refresh_from_db()
    assert (notebook.title, notebook.description) == ("New", "d")


def test_delete_notebook_asks_then_deletes(alice_client, alice):
    notebook = NotebookFactory.create(owner=alice, title="Doomed")
    NoteFactory.create(notebook=notebook)
    confirm = alice_client.get(f"/notebooks/{notebook.pk}/delete/")
    assert "Delete “Doomed”?" in confirm.content.decode()
    assert Notebook.objects.filter(pk=notebook.pk).exists()
    response = alice_client.post(f"/notebooks/{notebook.pk}/delete/")
    assert response.status_code == 302
    assert not Notebook.objects.filter(pk=notebook.pk).exists()
    assert not Note.objects.exists()


def test_new_note_opens_the_editor(alice_client, alice):
    notebook = NotebookFactory.create(owner=alice)
    response = alice_client.post(f"/notebooks/{notebook.pk}/notes/new/", {"title": "Ideas"})
    note = Note.objects.get(notebook=notebook)
    assert note.title == "Ideas"
    assert note.author == alice
    assert response["Location"] == f"/notes/{note.pk}/edit/"


def test_edit_note_saves_and_shows_rendered_markdown(alice_client, alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    response = alice_client.post(
        f"/notes/{note.pk}/edit/", {"title": "Plan", "body": "# Step one\n\n**now**"}
    )
    assert response["Location"] == f"/notes/{note.pk}/"
    page = alice_client.get(f"/notes/{note.pk}/").content.decode()
    assert "<h1>Step one</h1>" in page
    assert "<strong>now</strong>" in page


def test_preview_renders_posted_markdown(alice_client, alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    response = alice_client.post(
        f"/notes/{note.pk}/preview/", {"body": "*hi* <script>x</script>"}, headers=HTMX
    )
    body = response.content.decode()
    assert "<em>hi</em>" in body
    assert "<script>" not in body


def test_trash_and_restore_from_the_notebook_page(alice_client, alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), title="Keep me")
    trashed = alice_client.post(
        f"/notes/{note.pk}/trash/", {"from": "notebook"}, headers=HTMX
    ).content.decode()
    note.refresh_from_db()
    assert note.is_trashed
    assert "Trash (1)" in trashed
    assert f'id="trashed-note-{note.pk}"' in trashed
    restored = alice_client.post(
        f"/notes/{note.pk}/restore/", {"from": "notebook"}, headers=HTMX
    ).content.decode()
    assert Note.objects.get(pk=note.pk).trashed_at is None
    assert "Trash (0)" in restored


def test_trashed_note_editor_redirects_with_a_message(alice_client, alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    alice_client.post(f"/notes/{note.pk}/trash/")
    response = alice_client.get(f"/notes/{note.pk}/edit/", follow=True)
    assert "Restore it to edit it." in response.content.decode()


def test_delete_forever_only_works_on_trashed_notes(alice_client, alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    alice_client.post(f"/notes/{note.pk}/delete/")
    assert Note.objects.filter(pk=note.pk).exists()
    alice_client.post(f"/notes/{note.pk}/trash/")
    alice_client.post(f"/notes/{note.pk}/delete/")
    assert not Note.objects.filter(pk=note.pk).exists()


def test_oversized_note_body_is_refused_and_nothing_changes(alice_client, alice, settings):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), body="original")
    too_long = "x" * (settings.NOTE_BODY_MAX_CHARS + 1)
    response = alice_client.post(f"/notes/{note.pk}/edit/", {"title": "t", "body": too_long})
    assert response.status_code == 200
    assert "at most" in response.content.decode()
    note.refresh_from_db()
    assert note.body == "original"


def test_rename_page_without_js_is_a_plain_form_that_redirects(alice_client, alice):
    notebook = NotebookFactory.create(owner=alice, title="Old")
    page = alice_client.get(f"/notebooks/{notebook.pk}/rename/").content.decode()
    assert "hx-post" not in page.split('id="notebook-')[1].split("</form>")[0]
    response = alice_client.post(f"/notebooks/{notebook.pk}/rename/", {"title": "New"})
    assert response["Location"] == f"/notebooks/{notebook.pk}/"


def test_creating_a_notebook_with_htmx_opens_it(alice_client, alice):
    response = alice_client.post("/", {"title": "Thesis"}, headers=HTMX)
    notebook = Notebook.objects.get(owner=alice, title="Thesis")
    assert response["HX-Redirect"] == f"/notebooks/{notebook.pk}/"
