from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.http import Http404

from notes import selectors, services
from notes.models import Note, Notebook
from tests.factories import NotebookFactory, NoteFactory

pytestmark = pytest.mark.django_db


def test_notebook_create_cleans_title_and_belongs_to_owner(alice):
    notebook = services.notebook_create(owner=alice, title="  Thesis \n reading  ")
    assert notebook.title == "Thesis reading"
    assert notebook.owner == alice


def test_notebook_create_requires_a_title(alice):
    with pytest.raises(ValidationError) as exc:
        services.notebook_create(owner=alice, title="   ")
    assert "title" in exc.value.message_dict
    assert not Notebook.objects.exists()


def test_notebook_title_length_is_limited(alice):
    with pytest.raises(ValidationError):
        services.notebook_create(owner=alice, title="x" * 201)


def test_notebook_list_counts_only_live_notes(alice):
    notebook = NotebookFactory.create(owner=alice)
    NoteFactory.create_batch(2, notebook=notebook)
    services.note_trash(note=NoteFactory.create(notebook=notebook))
    (listed,) = selectors.notebook_list(user=alice)
    assert getattr(listed, "note_count", None) == 2


def test_notebook_list_shows_only_own_notebooks(alice, bob):
    mine = NotebookFactory.create(owner=alice)
    NotebookFactory.create(owner=bob)
    assert list(selectors.notebook_list(user=alice)) == [mine]


def test_notebook_get_refuses_other_users_notebook_like_a_missing_one(alice, bob_notebook):
    with pytest.raises(Http404):
        selectors.notebook_get(user=alice, notebook_id=bob_notebook.pk)
    with pytest.raises(Http404):
        selectors.notebook_get(user=alice, notebook_id=10**9)


def test_note_get_and_list_refuse_other_users_notes(alice, bob_note):
    with pytest.raises(Http404):
        selectors.note_get(user=alice, note_id=bob_note.pk)
    with pytest.raises(Http404):
        selectors.note_list(user=alice, notebook_id=bob_note.notebook_id)


def test_note_create_defaults_title_and_touches_notebook(alice):
    notebook = NotebookFactory.create(owner=alice)
    before = notebook.updated_at
    note = services.note_create(notebook=notebook, author=alice, title="", body="hi")
    assert note.title == services.UNTITLED_NOTE
    notebook.refresh_from_db()
    assert notebook.updated_at > before


def test_note_body_size_is_limited(alice, settings):
    settings.NOTE_BODY_MAX_CHARS = 1000
    notebook = NotebookFactory.create(owner=alice)
    with pytest.raises(ValidationError):
        services.note_create(notebook=notebook, author=alice, body="x" * 1001)
    assert not Note.objects.exists()


def test_trash_restore_cycle_moves_note_between_lists(alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    services.note_trash(note=note)
    assert list(selectors.note_list(user=alice, notebook_id=note.notebook_id)) == []
    assert list(selectors.note_list(user=alice, notebook_id=note.notebook_id, trashed=True)) == [
        note
    ]
    with pytest.raises(Http404):
        selectors.note_get(user=alice, note_id=note.pk, include_trashed=False)
    services.note_restore(note=note)
    assert list(selectors.note_list(user=alice, notebook_id=note.notebook_id)) == [note]


def test_trashed_note_cannot_be_edited(alice):
    note = services.note_trash(
        note=NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    )
    with pytest.raises(ValidationError):
        services.note_update(note=note, body="new")
    note.refresh_from_db()
    assert note.body != "new"


def test_delete_forever_only_from_trash(alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    with pytest.raises(ValidationError):
        services.note_delete(note=note)
    assert Note.objects.filter(pk=note.pk).exists()
    services.note_delete(note=services.note_trash(note=note))
    assert not Note.objects.filter(pk=note.pk).exists()


def test_notebook_delete_removes_its_notes(alice):
    notebook = NotebookFactory.create(owner=alice)
    NoteFactory.create_batch(3, notebook=notebook)
    services.notebook_delete(notebook=notebook)
    assert not Note.objects.exists()
