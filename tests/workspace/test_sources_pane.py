"""The Sources pane tells sources from notes: a note made only to hold a dropped file is shown
as that file (not in the Notes pane or the notebook's note count) until someone writes in it;
a note made from a Markdown/text file is listed under Sources too; the counts, the empty state
and the chat's first hint follow the sources as they arrive (workspace:sources_state)."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from attachments import services
from notes import selectors
from notes.models import NotebookMembership, Role
from notes.services import note_update
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import text_pdf

pytestmark = pytest.mark.django_db


@pytest.fixture
def notebook(alice):
    return NotebookFactory.create(owner=alice, title="Reading")


def drop_pdf(alice, notebook, name="report.pdf"):
    data = text_pdf([f"Quarterly figures of {name}", "Revenue grew in the north."])
    uploaded = SimpleUploadedFile(name, data, "application/pdf")
    return services.source_add(user=alice, notebook=notebook, uploaded=uploaded).attachment


def drop_text(alice, notebook, name="ideas.md", text="# Ideas\n\nWrite more tests."):
    uploaded = SimpleUploadedFile(name, text.encode(), "text/markdown")
    return services.source_add(user=alice, notebook=notebook, uploaded=uploaded).note


def count_in(html: str, element_id: str) -> int:
    match = re.search(rf'id="{element_id}"[^>]*>(\d+)<', html)
    assert match, element_id
    return int(match.group(1))


def test_a_note_holding_only_a_dropped_file_is_not_listed_or_counted_as_a_note(alice, notebook):
    written = NoteFactory.create(notebook=notebook, author=alice, title="Mine", body="Hello")
    empty = NoteFactory.create(notebook=notebook, author=alice, title="Blank", body="")
    holder = drop_pdf(alice, notebook).note
    listed = selectors.note_list(user=alice, notebook_id=notebook.pk, written=True)
    assert set(listed) == {written, empty}  # an empty note of one's own is still a note
    assert set(selectors.note_list(user=alice, notebook_id=notebook.pk)) == {written, empty, holder}
    assert selectors.notebook_get(user=alice, notebook_id=notebook.pk).note_count == 2
    # Once someone writes in it, it is a note like any other.
    note_update(note=holder, body="What I think of it.", editor=alice)
    assert holder in selectors.note_list(user=alice, notebook_id=notebook.pk, written=True)
    assert selectors.notebook_get(user=alice, notebook_id=notebook.pk).note_count == 3


def test_the_note_count_of_a_notebook_with_many_files_counts_no_file_twice(alice, notebook):
    note = NoteFactory.create(notebook=notebook, author=alice, title="Two files", body="Both")
    for name in ("a.pdf", "b.pdf"):
        uploaded = SimpleUploadedFile(name, text_pdf([name, f"Text of {name}."]), "application/pdf")
        services.source_add(user=alice, notebook=notebook, uploaded=uploaded, note=note)
    drop_pdf(alice, notebook)
    books = {nb.pk: nb.note_count for nb in selectors.notebook_list(user=alice)}
    assert books[notebook.pk] == 1


def test_the_workspace_shows_holders_as_their_files_and_text_notes_under_sources(
    alice, alice_client, notebook
):
    attachment = drop_pdf(alice, notebook, name="holder-report.pdf")
    text_note = drop_text(alice, notebook)
    assert text_note.from_file == "ideas.md"
    html = alice_client.get(f"/notebooks/{notebook.pk}/").content.decode()
    sources, _, rest = html.partition('id="pane-chat"')
    notes_pane = rest.partition('id="pane-notes"')[2]
    # The PDF's row is in Sources without a heading repeating its note's title …
    assert f'id="source-{attachment.pk}"' in sources
    assert f'data-source-ref="note:{attachment.note_id}"' not in sources
    # … and its note is not in the Notes pane, while the text file's note is in both.
    assert f'id="note-{attachment.note_id}"' not in notes_pane
    assert f'id="note-{text_note.pk}"' in notes_pane
    assert 'data-testid="file-note-source"' in sources
    assert f'data-source-ref="note:{text_note.pk}"' in sources
    assert count_in(html, "source-count") == 2
    assert count_in(html, "tab-note-count") == 1
    assert "No sources yet." not in sources
    # The drop zone can still put a file into the note holding the PDF.
    assert f'<option value="{attachment.note_id}"' in html


def test_the_live_state_follows_the_sources_as_they_arrive(alice, alice_client, notebook):
    url = f"/notebooks/{notebook.pk}/sources-state/"
    before = alice_client.get(url).content.decode()
    assert count_in(before, "source-count") == 0
    assert "No sources yet." in before
    assert "First add a source" in before
    assert before.count('hx-swap-oob="true"') >= 6
    attachment = drop_pdf(alice, notebook)
    text_note = drop_text(alice, notebook)
    after = alice_client.get(f"{url}?note={attachment.note_id}").content.decode()
    assert count_in(after, "source-count") == 2
    assert count_in(after, "tab-source-count") == 2
    assert count_in(after, "tab-note-count") == 1
    assert "No sources yet." not in after
    assert "First add a source" not in after
    assert f'data-source-ref="note:{text_note.pk}"' in after
    assert f'<option value="{attachment.note_id}" selected>' in after  # the choice is kept


def test_a_text_note_in_the_trash_leaves_the_sources(alice, alice_client, notebook):
    text_note = drop_text(alice, notebook)
    response = alice_client.post(
        f"/notes/{text_note.pk}/trash/", {"from": "notebook"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert response["HX-Trigger"] == "sources-changed"
    state = alice_client.get(f"/notebooks/{notebook.pk}/sources-state/").content.decode()
    assert f'data-source-ref="note:{text_note.pk}"' not in state
    assert count_in(state, "source-count") == 0


def test_a_viewer_gets_the_state_without_the_drop_zone_choices(alice, bob, notebook):
    NotebookMembership.objects.create(notebook=notebook, user=bob, role=Role.VIEWER)
    drop_text(alice, notebook)
    client = Client()
    client.force_login(bob)
    state = client.get(f"/notebooks/{notebook.pk}/sources-state/").content.decode()
    assert count_in(state, "source-count") == 1
    assert 'id="upload-note"' not in state


def test_the_notebook_list_counts_sources_beside_notes(alice, alice_client, notebook):
    drop_pdf(alice, notebook)
    drop_pdf(alice, notebook, name="second.pdf")
    NoteFactory.create(notebook=notebook, author=alice, title="Mine", body="Hello")
    (listed,) = [nb for nb in selectors.notebook_list(user=alice) if nb.pk == notebook.pk]
    assert (listed.note_count, listed.source_count) == (1, 2)
    html = alice_client.get("/").content.decode()
    assert "1 note<" in html
    assert "2 sources" in html
