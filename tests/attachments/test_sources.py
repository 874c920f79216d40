"""Sources by kind: the upload allowlist (refused before anything is stored) on the note page,
the workspace's drop zone and the API; Markdown and text files become notes, hashed as text."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from attachments.models import NoteAttachment
from attachments.validation import normalise_text, text_sha256, upload_accept
from notes.models import Note
from search.retrieval import Scope, search
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import sample

pytestmark = pytest.mark.django_db

MARKDOWN = "# Field notes\n\nThe heron waited by the millpond until dusk.\n"


@pytest.fixture
def notebook(alice):
    return NotebookFactory.create(owner=alice)


@pytest.fixture
def note(alice, notebook):
    return NoteFactory.create(notebook=notebook, author=alice, title="Mine", body="my own text")


def _stored_files() -> list[Path]:
    return [p for p in Path(settings.MEDIA_ROOT).rglob("*") if p.is_file()]


def _file(name: str, data: bytes | str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data.encode() if isinstance(data, str) else data)


def page_upload(client, note, name, data, **extra):
    return client.post(
        f"/notes/{note.pk}/attachments/",
        {"files": [_file(name, data)], **extra},
        headers={"X-Upload": "1"},
    )


def dropzone_upload(client, notebook, name, data, **extra):
    return client.post(
        f"/notebooks/{notebook.pk}/sources/",
        {"files": [_file(name, data)], **extra},
        headers={"X-Upload": "1"},
    )


def api_upload(client, note, name, data):
    return client.post(f"/api/notes/{note.pk}/attachments", {"files": [_file(name, data)]})


PDF_BYTES = sample("text.pdf")
REFUSED = [
    ("setup.exe", b"MZ\x90\x00binary"),
    ("paper.pdf.exe", PDF_BYTES),  # a real PDF under a name we do not take
    ("README", b"no extension at all"),
]
# Names of kinds we read (attachments.formats) over content that is not that kind.
NOT_WHAT_THEY_SAY = [
    ("report.docx", b"PK\x03\x04 a zip", "Word document"),
    ("page.html", PDF_BYTES, "HTML page"),
    ("talk.vtt", b"MZ\x90\x00binary", "WebVTT transcript"),
]
ACCEPTED = (
    ".pdf, .md, .txt, .jpg, .jpeg, .png, .gif, .webp, .aac, .docx, .epub, .htm, .html, .m4a, "
    ".mp3, .mp4a, .odt, .oga, .ogg, .opus, .pptx, .srt, .vtt, .wav, .xhtml, .xlsx"
)


@pytest.mark.parametrize(("name", "data"), REFUSED)
@pytest.mark.parametrize("where", ["page", "dropzone", "dropzone-into-note", "api"])
def test_other_extensions_are_refused_before_anything_is_stored(
    alice_client, alice_api, notebook, note, where, name, data
):
    notes_before = Note.objects.count()
    if where == "page":
        response = page_upload(alice_client, note, name, data)
        assert response.status_code == 400
        text = response.content.decode()
    elif where == "dropzone":
        response = dropzone_upload(alice_client, notebook, name, data)
        assert response.status_code == 400
        text = response.content.decode()
    elif where == "dropzone-into-note":
        response = dropzone_upload(alice_client, notebook, name, data, note=str(note.pk))
        assert response.status_code == 400
        text = response.content.decode()
    else:
        response = api_upload(alice_api, note, name, data)
        assert response.status_code == 422
        (error,) = response.json()["errors"]
        assert error["code"] == "file_type"
        text = error["detail"]
    assert f"“{name}” cannot be added: only {ACCEPTED} files are accepted." in text
    assert not NoteAttachment.objects.exists()
    assert Note.objects.count() == notes_before
    assert _stored_files() == []


@pytest.mark.parametrize(("name", "data", "what"), NOT_WHAT_THEY_SAY)
@pytest.mark.parametrize("where", ["page", "dropzone", "api"])
def test_a_file_whose_content_is_not_its_kind_is_refused_before_anything_is_stored(
    alice_client, alice_api, notebook, note, where, name, data, what
):
    notes_before = Note.objects.count()
    if where == "page":
        response = page_upload(alice_client, note, name, data)
        assert response.status_code == 400
        text = response.content.decode()
    elif where == "dropzone":
        response = dropzone_upload(alice_client, notebook, name, data)
        assert response.status_code == 400
        text = response.content.decode()
    else:
        response = api_upload(alice_api, note, name, data)
        assert response.status_code == 422
        (error,) = response.json()["errors"]
        assert error["code"] == "file_type"
        text = error["detail"]
    assert f"“{name}” is not a real {what}: its content is something else." in text
    assert not NoteAttachment.objects.exists()
    assert Note.objects.count() == notes_before
    assert _stored_files() == []


def test_a_refused_file_does_not_stop_the_others(alice_client, notebook):
    response = alice_client.post(
        f"/notebooks/{notebook.pk}/sources/",
        {"files": [_file("a.exe", b"MZ"), _file("b.md", MARKDOWN), _file("text.pdf", PDF_BYTES)]},
        headers={"X-Upload": "1"},
    )
    assert response.status_code == 201
    assert "“a.exe” cannot be added" in response.content.decode()
    assert Note.objects.filter(notebook=notebook, title="b").exists()
    assert NoteAttachment.objects.get().original_name == "text.pdf"


def test_a_plain_form_post_of_a_refused_file_says_why(alice_client, note):
    response = alice_client.post(
        f"/notes/{note.pk}/attachments/", {"files": [_file("x.zip", b"PK")]}, follow=True
    )
    assert "“x.zip” cannot be added" in response.content.decode()
    assert _stored_files() == []


@pytest.mark.parametrize("where", ["page", "dropzone", "api"])
def test_markdown_and_text_files_become_searchable_notes(
    alice, alice_client, alice_api, notebook, note, where
):
    upload = {
        "page": lambda name, data: page_upload(alice_client, note, name, data),
        "dropzone": lambda name, data: dropzone_upload(alice_client, notebook, name, data),
        "api": lambda name, data: api_upload(alice_api, note, name, data),
    }[where]
    response = upload("Field_notes-2024.md", MARKDOWN)
    assert response.status_code == 201, response.content
    md = Note.objects.get(notebook=notebook, title="Field notes 2024")
    assert md.body == MARKDOWN.strip()
    assert md.author == alice
    response = upload("shopping list.TXT", "flour\r\nquince jelly\r\n")
    assert response.status_code == 201, response.content
    txt = Note.objects.get(notebook=notebook, title="shopping list")
    assert txt.body == "flour\nquince jelly"
    if where == "api":
        assert response.json()["notes"] == [
            {"file": "shopping list.TXT", "note_id": txt.pk, "title": "shopping list"}
        ]
        assert response.json()["attachments"] == []
    else:
        html = response.content.decode()
        assert f'href="/notes/{txt.pk}/"' in html
        assert "Added “shopping list.TXT” as the note" in html
    assert not NoteAttachment.objects.exists()
    assert _stored_files() == []  # the text lives in the note, not in a file
    note.refresh_from_db()
    assert note.body == "my own text"  # the note uploaded on is left alone

    hits = search(
        user=alice, query="heron millpond", scope=Scope(notebook_id=notebook.pk), mode="lexical"
    ).hits
    assert hits
    assert (hits[0].kind, hits[0].note.pk) == ("note", md.pk)
    hits = search(
        user=alice, query="quince", scope=Scope(notebook_id=notebook.pk), mode="lexical"
    ).hits
    assert [h.note.pk for h in hits] == [txt.pk]


def test_a_plain_form_post_of_a_text_file_says_which_note_it_became(alice_client, note):
    response = alice_client.post(
        f"/notes/{note.pk}/attachments/", {"files": [_file("ideas.md", MARKDOWN)]}, follow=True
    )
    assert "Added “ideas.md” as the note “ideas”." in response.content.decode()


@pytest.mark.parametrize(
    "variant",
    [
        MARKDOWN,
        MARKDOWN.replace("\n", "\r\n"),  # Windows line ends
        "\ufeff" + MARKDOWN,  # a UTF-8 byte order mark
        "\n\n" + MARKDOWN + "   \n\n",  # blank space around it
    ],
)
def test_the_same_text_twice_in_a_notebook_is_refused_naming_its_note(
    alice_client, alice_api, notebook, note, variant
):
    assert page_upload(alice_client, note, "first.md", MARKDOWN).status_code == 201
    response = dropzone_upload(alice_client, notebook, "second copy.txt", variant)
    assert response.status_code == 409
    html = response.content.decode()
    assert "The text of “second copy.txt” is already in the note “first”." in html
    first = Note.objects.get(title="first")
    assert f'href="/notes/{first.pk}/"' in html
    response = api_upload(alice_api, note, "third.md", variant)
    assert response.status_code == 409
    (error,) = response.json()["errors"]
    assert (error["code"], error["existing_note_id"]) == ("duplicate", first.pk)
    assert Note.objects.filter(notebook=notebook).count() == 2  # `note` and "first"


def test_a_note_typed_with_the_same_text_counts_and_other_notebooks_do_not(
    alice, alice_client, notebook
):
    typed = NoteFactory.create(notebook=notebook, author=alice, title="Typed", body=MARKDOWN)
    response = dropzone_upload(alice_client, notebook, "copy.md", MARKDOWN)
    assert response.status_code == 409
    assert "already in the note “Typed”" in response.content.decode()
    typed.trashed_at = typed.updated_at  # a note in the trash holds nothing
    typed.save()
    assert dropzone_upload(alice_client, notebook, "copy.md", MARKDOWN).status_code == 201
    other = NotebookFactory.create(owner=alice)
    assert dropzone_upload(alice_client, other, "copy.md", MARKDOWN).status_code == 201


def test_sql_and_python_hash_the_same_normalised_text(alice, notebook):
    from attachments.services import note_holding_text

    body = "Cafe\u0301 crème\r\nsecond line\rthird\t \n"  # decomposed é, CR and CRLF
    note = NoteFactory.create(notebook=notebook, author=alice, title="N", body=body)
    digest = text_sha256(normalise_text(body))
    assert note_holding_text(notebook=notebook, sha256=digest) == note


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("latin1.txt", "café au lait".encode("latin-1")),
        ("binary.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
        ("nul.txt", b"text with a \x00 inside"),
        ("cut.txt", "naïve café".encode()[:-1]),  # cut inside its last character
    ],
)
def test_undecodable_or_binary_text_is_refused(alice_client, alice_api, note, name, data):
    notes_before = Note.objects.count()
    response = page_upload(alice_client, note, name, data)
    assert response.status_code == 400
    assert f"“{name}” is not readable text" in response.content.decode()
    response = api_upload(alice_api, note, name, data)
    assert response.status_code == 422
    assert response.json()["errors"][0]["code"] == "not_text"
    assert Note.objects.count() == notes_before
    assert _stored_files() == []


def test_utf16_with_a_byte_order_mark_is_read(alice_client, notebook):
    data = "\ufeffHeron notes".encode("utf-16-le")
    assert dropzone_upload(alice_client, notebook, "w.txt", data).status_code == 201
    assert Note.objects.get(title="w").body == "Heron notes"


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"", "is empty"), (b" \r\n\t\n", "is empty"), (b"x" * 1001, "too long for a note")],
)
def test_empty_or_too_long_text_is_refused(alice_client, notebook, settings, data, message):
    settings.NOTE_BODY_MAX_CHARS = 1000
    response = dropzone_upload(alice_client, notebook, "t.txt", data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Note.objects.filter(title="t").exists()


def test_a_trashed_note_takes_no_files_of_any_kind(alice_client, note):
    note.trashed_at = note.updated_at
    note.save()
    for name, data in [("a.md", MARKDOWN), ("text.pdf", PDF_BYTES)]:
        response = page_upload(alice_client, note, name, data)
        assert response.status_code == 400
        assert "Restore the note from the trash" in response.content.decode()
    assert not Note.objects.filter(title="a").exists()
    assert _stored_files() == []


def test_bob_cannot_add_text_to_alices_notebook(bob, notebook, note):
    from django.test import Client

    client = Client()
    client.force_login(bob)
    assert page_upload(client, note, "x.md", MARKDOWN).status_code == 404
    assert dropzone_upload(client, notebook, "x.md", MARKDOWN).status_code == 404
    assert not Note.objects.filter(title="x").exists()


def test_file_inputs_accept_what_the_allowlist_takes(alice_client, note):
    ooxml = "application/vnd.openxmlformats-officedocument."
    accept = (
        "application/pdf,text/markdown,text/plain,image/jpeg,image/png,image/gif,image/webp,"
        "text/html,text/vtt,application/x-subrip,audio/mpeg,audio/mp4,audio/wav,audio/ogg,"
        f"{ooxml}wordprocessingml.document,{ooxml}presentationml.presentation,"
        f"{ooxml}spreadsheetml.sheet,application/vnd.oasis.opendocument.text,"
        "application/epub+zip,.pdf,.md,.txt,.jpg,.jpeg,.png,.gif,.webp,.aac,.docx,.epub,.htm,"
        ".html,.m4a,.mp3,.mp4a,.odt,.oga,.ogg,.opus,.pptx,.srt,.vtt,.wav,.xhtml,.xlsx"
    )
    assert upload_accept() == accept
    html = alice_client.get(f"/notes/{note.pk}/").content.decode()
    assert f'accept="{accept}"' in html
