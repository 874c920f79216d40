"""Studio's pages and downloads in-process: the pane (buttons, list, empty state, errors in
place), an output's page for every kind (citation chips that open the viewer, escaped
source text), progress, regenerate, cancel, rename, delete, Markdown and CSV, and who may do
what in a shared notebook."""

from __future__ import annotations

import csv
import io

import pytest
from django.test import Client
from django.urls import reverse

from notes.services import membership_add
from studio import services
from studio.models import StudioOutput
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_of():
    def make(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


def made(library, kind: str) -> StudioOutput:
    return made_from(library, kind)


def made_from(library, kind: str, **scope) -> StudioOutput:
    output = services.output_create(
        user=library.alice, notebook_id=library.book.pk, kind=kind, **scope
    )
    services.output_write(output_id=output.pk, token=output.token)
    output.refresh_from_db()
    assert output.status == "ready", output.error
    return output


def test_the_workspace_has_a_studio_pane_and_tab(library, client_of):
    page = client_of(library.alice).get(reverse("workspace:page", args=[library.book.pk]))
    html = page.content.decode()
    assert 'id="pane-studio"' in html
    assert 'data-tab="studio"' in html
    assert reverse("studio:notebook", args=[library.book.pk]) in html


def test_the_pane_offers_a_button_per_kind_and_lists_outputs(library, client_of):
    alice = client_of(library.alice)
    url = reverse("studio:notebook", args=[library.book.pk])
    empty = alice.get(url, headers={"HX-Request": "true"}).content.decode()
    assert 'data-testid="studio-empty"' in empty
    for kind in StudioOutput.Kind.values:
        assert f'data-testid="studio-{kind}"' in empty
    response = alice.post(
        url, {"kind": "briefing", "excluded": "[]"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="studio-row"' in html
    assert 'data-status="pending"' in html
    assert 'hx-trigger="every 2s"' in html  # it polls while the output is written
    output = StudioOutput.objects.get()
    assert output.created_by == library.alice
    assert output.scope == []


def test_bad_requests_are_refused_in_place_and_make_nothing(library, client_of):
    alice = client_of(library.alice)
    url = reverse("studio:notebook", args=[library.book.pk])
    every = [f"attachment:{a.pk}" for a in (library.bees, library.sailing, library.history)]
    every.append(f"note:{library.bees.note_id}")
    cases = [
        {"kind": "podcast"},
        {"kind": "faq", "excluded": "not json"},
        {"kind": "faq", "excluded": str(every).replace("'", '"')},
    ]
    for data in cases:
        plain = alice.post(url, data)
        assert plain.status_code == 400, data
        assert b'data-testid="studio-error"' in plain.content
        in_place = alice.post(url, data, headers={"HX-Request": "true"})
        assert in_place.status_code == 200
        assert b'data-testid="studio-error"' in in_place.content
    assert not StudioOutput.objects.exists()


@pytest.mark.parametrize("kind", StudioOutput.Kind.values)
def test_each_output_page_shows_its_statements_with_citation_chips(
    library, client_of, kind, settings
):
    settings.STUDIO_SPEECH_SLICE_SECONDS = 600.0  # an audio overview: spoken in one job
    others = f'["attachment:{library.bees.pk}", "attachment:{library.sailing.pk}"]'
    output = (
        made(library, kind)
        if kind != "audio"
        else made_from(library, kind, excluded=others)  # Piper speaks the short one
    )
    html = client_of(library.alice).get(reverse("studio:output", args=[output.pk])).content.decode()
    assert 'data-testid="studio-output"' in html
    assert 'data-testid="citation-chip"' in html
    assert "data-viewer-file=" in html
    assert "data-viewer-quote=" in html
    assert 'data-testid="studio-provenance"' in html
    assert reverse("exports:studio_markdown", args=[output.pk]) in html


def test_source_text_is_shown_as_text(library, client_of):
    output = made(library, "briefing")
    content = output.content
    content["sections"][0]["items"][0]["text"] = (
        "<script>alert(1)</script> **bold** [link](https://evil.example) "
        + content["sections"][0]["items"][0]["text"]
    )
    StudioOutput.objects.filter(pk=output.pk).update(content=content)
    html = client_of(library.alice).get(reverse("studio:output", args=[output.pk])).content.decode()
    assert "<script>alert(1)" not in html
    assert "&lt;script&gt;" in html
    assert "<strong>bold</strong>" not in html
    assert 'href="https://evil.example"' not in html


def test_progress_cancel_and_regenerate(library, client_of):
    alice = client_of(library.alice)
    output = services.output_create(user=library.alice, notebook_id=library.book.pk, kind="faq")
    status = alice.get(reverse("studio:status", args=[output.pk])).content.decode()
    assert 'data-status="pending"' in status
    assert "every 1s" in status
    alice.post(reverse("studio:cancel", args=[output.pk]))
    output.refresh_from_db()
    assert output.status == "cancelled"
    old = output.token
    services.output_write(output_id=output.pk, token=old - 1)  # the cancelled run's token
    output.refresh_from_db()
    assert output.status == "cancelled"  # it writes nothing
    done = alice.get(reverse("studio:status", args=[output.pk]) + "?was=active")
    assert done["HX-Refresh"] == "true"
    alice.post(reverse("studio:regenerate", args=[output.pk]))
    output.refresh_from_db()
    assert output.status == "pending"
    assert output.token == old + 1
    services.output_write(output_id=output.pk, token=output.token)
    output.refresh_from_db()
    assert output.status == "ready"
    assert output.progress == 100


def test_a_run_cancelled_midway_stops_at_its_next_heartbeat(library, monkeypatch):
    from studio.services import building

    output = services.output_create(user=library.alice, notebook_id=library.book.pk, kind="faq")
    real = building.BUILDERS["faq"]

    def cancelled_midway(material, beat):
        beat("passages", 10)
        services.output_cancel(user=library.alice, output_id=output.pk)
        return real(material, beat)

    monkeypatch.setitem(building.BUILDERS, "faq", cancelled_midway)
    services.output_write(output_id=output.pk, token=output.token)
    output.refresh_from_db()
    assert output.status == "cancelled"
    assert output.content == {}


def test_rename_and_delete(library, client_of):
    alice = client_of(library.alice)
    output = made(library, "timeline")
    assert (
        alice.post(reverse("studio:rename", args=[output.pk]), {"title": "  "}).status_code == 400
    )
    alice.post(reverse("studio:rename", args=[output.pk]), {"title": "Valley  history"})
    output.refresh_from_db()
    assert output.title == "Valley history"
    assert alice.get(reverse("studio:delete", args=[output.pk])).status_code == 200
    alice.post(reverse("studio:delete", args=[output.pk]))
    assert not StudioOutput.objects.filter(pk=output.pk).exists()


def test_members_see_outputs_with_who_made_them_and_only_editors_change_them(library, client_of):
    viewer = UserFactory.create(username="vera")
    editor = UserFactory.create(username="ed")
    membership_add(notebook=library.book, by=library.alice, identifier="vera", role="viewer")
    membership_add(notebook=library.book, by=library.alice, identifier="ed", role="editor")
    output = made(library, "briefing")
    vera = client_of(viewer)
    pane = vera.get(reverse("studio:notebook", args=[library.book.pk])).content.decode()
    assert "by alice" in pane
    assert 'data-testid="studio-briefing"' not in pane
    page = vera.get(reverse("studio:output", args=[output.pk])).content.decode()
    assert "made by alice" in page
    assert 'data-testid="studio-regenerate"' not in page
    for name in ("studio:regenerate", "studio:cancel", "studio:delete"):
        assert vera.post(reverse(name, args=[output.pk])).status_code == 403
    assert (
        vera.post(reverse("studio:notebook", args=[library.book.pk]), {"kind": "faq"}).status_code
        == 403
    )
    assert StudioOutput.objects.count() == 1
    ed = client_of(editor)
    ed.post(reverse("studio:regenerate", args=[output.pk]))
    output.refresh_from_db()
    assert output.status == "pending"


def test_markdown_names_file_page_and_quote_in_footnotes(library, client_of):
    output = made(library, "study_guide")
    response = client_of(library.alice).get(reverse("exports:studio_markdown", args=[output.pk]))
    assert response["Content-Type"].startswith("text/markdown")
    text = response.content.decode()
    assert text.startswith("---\n")
    assert "[^1]" in text
    first = output.content["citations"][0]
    assert f"[^1]: {first['file']}, page {first['page']}: “" in text


def test_flashcards_download_as_csv_for_anki(library, client_of):
    output = made(library, "flashcards")
    alice = client_of(library.alice)
    response = alice.get(reverse("exports:studio_csv", args=[output.pk]))
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode("utf-8-sig"))))
    assert len(rows) == len(output.content["sections"][0]["items"])
    assert all(front and back and "page" in back for front, back in rows)
    briefing = made(library, "briefing")
    assert alice.get(reverse("exports:studio_csv", args=[briefing.pk])).status_code == 409
    pending = services.output_create(user=library.alice, notebook_id=library.book.pk, kind="quiz")
    assert alice.get(reverse("exports:studio_markdown", args=[pending.pk])).status_code == 409


def test_the_notebook_export_holds_its_ready_outputs(library, client_of):
    import zipfile

    made(library, "faq")
    services.output_create(user=library.alice, notebook_id=library.book.pk, kind="quiz")  # pending
    response = client_of(library.alice).get(reverse("exports:notebook", args=[library.book.pk]))
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    studio = [n for n in archive.namelist() if n.startswith("studio/")]
    assert studio == ["studio/FAQ_ Hobbies.md"]  # the title made safe as a file name
    assert "[^1]:" in archive.read(studio[0]).decode()
