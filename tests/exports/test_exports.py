"""Exports: a notebook as a ZIP, a conversation as Markdown, all of a user's data. The ZIPs
are opened with zipfile and their files compared with what was stored."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from django.test import Client

from accounts.services import api_token_create
from chat.models import Conversation, Memory, Message
from exports.archive import BLOCK, Archive, zip_chunks
from exports.naming import STEM_MAX_BYTES, safe_name
from guides.models import Guide
from notes.services import note_create, note_trash, notebook_create
from tests.factories import NoteFactory
from tests.fixtures.documents import text_pdf, upload

pytestmark = pytest.mark.django_db


def _zip(response) -> zipfile.ZipFile:
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "application/zip"
    data = b"".join(response.streaming_content)
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.testzip() is None  # every CRC checks out
    return archive


def _front_matter(text: str) -> tuple[dict[str, Any], str]:
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n\n", 1)
    return yaml.safe_load(head), body


@pytest.fixture
def book(alice):
    return notebook_create(owner=alice, title="Field notes", description="Birds by the pond")


def _answer(conversation, content, citations, status="complete"):
    question = Message.objects.create(conversation=conversation, role="user", content="Where?")
    return Message.objects.create(
        conversation=conversation, role="assistant", content=content, citations=citations,
        status=status, reply_to=question, answerer="llm",
    )  # fmt: skip


def _citation(n, *, file="survey.pdf", page=3, quote="The heron waited by the millpond."):
    return {"n": n, "kind": "document", "attachment_id": 1, "file": file, "page": page,
            "chunk_id": 1, "quote": quote}  # fmt: skip


def test_notes_are_markdown_files_with_front_matter_and_their_bodies_unchanged(
    alice, alice_client, book
):
    bodies = {
        "Heron": "# Heron\n\nWaits *still* by the pond.\n\n- one\n- two\n",
        "Ducks": "---\nnot: front matter\n---\nA body that starts like front matter.",
    }
    for title, body in bodies.items():
        note_create(notebook=book, author=alice, title=title, body=body)
    gone = note_create(notebook=book, author=alice, title="Old", body="trashed body")
    note_trash(note=gone)

    archive = _zip(alice_client.get(f"/notebooks/{book.pk}/export/"))

    names = set(archive.namelist())
    assert {"notes/Heron.md", "notes/Ducks.md", "trash/Old.md", "README.md"} <= names
    assert not any(name.startswith("sources/") for name in names)
    for title, body in bodies.items():
        fields, text = _front_matter(archive.read(f"notes/{title}.md").decode())
        assert text == body
        assert fields["title"] == title
        assert fields["author"] == "alice"
        assert fields["created"]
        assert fields["updated"]
    readme = archive.read("README.md").decode()
    assert "Field notes" in readme
    assert "Birds by the pond" in readme
    assert "`notes/Heron.md`" in readme
    assert "`trash/Old.md`" in readme


def test_a_title_holding_yaml_stays_one_front_matter_value(alice, alice_client, book):
    title = 'x: "y"\n---\nauthor: mallory'
    NoteFactory.create(notebook=book, author=alice, title=title, body="b")
    archive = _zip(alice_client.get(f"/notebooks/{book.pk}/export/"))
    (name,) = [n for n in archive.namelist() if n.startswith("notes/")]
    fields, body = _front_matter(archive.read(name).decode())
    assert fields["title"] == title
    assert fields["author"] == "alice"
    assert body == "b"


HOSTILE = [
    "../../etc/passwd",
    "..",
    "CON",
    "nul.txt",
    "a/b\\c",
    "/absolute",
    "tab\there\x07bell\x1b[31m",
    "\u202egnp.exe",
    "🦆 Ducks & “quotes” <3 | ok?",
    "x" * 200,  # the longest a title can be; safe_name's own test takes 300
    "é" * 200,
    "Same",
    "Same",
    "same",
    "   ",
]


def test_hostile_titles_become_safe_and_unique_file_names(alice, alice_client, book, tmp_path):
    for title in HOSTILE:
        NoteFactory.create(notebook=book, author=alice, title=title, body=f"body of {title!r}")

    archive = _zip(alice_client.get(f"/notebooks/{book.pk}/export/"))

    notes = [n for n in archive.namelist() if n.startswith("notes/")]
    assert len(notes) == len(HOSTILE)
    assert len({n.casefold() for n in notes}) == len(notes)  # unique, also case-insensitively
    for name in notes:
        path = PurePosixPath(name)
        assert path.parts[0] == "notes", name
        assert len(path.parts) == 2, name
        leaf = path.parts[1]
        assert "\\" not in leaf
        assert ":" not in leaf
        assert not leaf.startswith((".", " "))
        assert not any(ord(c) < 32 or c in "\u202e\x7f" for c in leaf)
        assert len(leaf.encode()) <= STEM_MAX_BYTES + len(" (99).md")
        assert leaf.split(".")[0].upper() not in {"CON", "NUL", "PRN", "AUX"}
    assert "notes/_CON.md" in notes
    assert "notes/🦆 Ducks & “quotes” _3 _ ok_.md" in notes
    same = {n.casefold() for n in notes if n.casefold().startswith("notes/same")}
    assert same == {"notes/same.md", "notes/same (2).md", "notes/same (3).md"}
    # Unpacked, everything stays inside the folder it is unpacked into.
    archive.extractall(tmp_path)
    for root, _dirs, files in os.walk(tmp_path):
        for file in files:
            assert Path(root, file).resolve().is_relative_to(tmp_path.resolve())
    # Each body is in its own file.
    bodies = sorted(_front_matter(archive.read(n).decode())[1] for n in notes)
    assert bodies == sorted(f"body of {t!r}" for t in HOSTILE)


@pytest.mark.parametrize(
    ("title", "expected"),
    [("../../etc/passwd", "_.._etc_passwd"), ("...", "untitled"), ("LPT1.md", "_LPT1.md"),
     ("a\x00b", "ab"), ("trailing. ", "trailing"), ("x" * 300, "x" * STEM_MAX_BYTES),
     ("🦆" * 300, "🦆" * (STEM_MAX_BYTES // 4))],
)  # fmt: skip
def test_safe_name(title, expected):
    assert safe_name(title) == expected


def test_conversations_are_the_requesters_own_with_citations_as_footnotes(
    alice, bob, alice_client, book
):
    mine = Conversation.objects.create(owner=alice, notebook=book, title="Herons")
    multi = "The heron waited\nuntil dusk."
    _answer(mine, "It waited [1]. Again [1], and unverified [7]. Code `[1]` stays.",
            [_citation(1), _citation(1, file="log.pdf", page=9, quote=multi)])  # fmt: skip
    _answer(mine, "A second answer [1].", [_citation(1, page=4, quote="Second quote.")])
    _answer(mine, "half", [], status="error")
    # Someone else's conversation in the same notebook (a member's, once notebooks are
    # shared): never in Alice's export.
    theirs = Conversation.objects.create(owner=bob, notebook=book, title="Bob's private chat")
    _answer(theirs, "bob's answer [1]", [_citation(1, quote="bob's quote")])

    archive = _zip(alice_client.get(f"/notebooks/{book.pk}/export/"))
    chats = [n for n in archive.namelist() if n.startswith("conversations/")]
    assert chats == ["conversations/Herons.md"]
    text = archive.read("conversations/Herons.md").decode()
    assert "Bob" not in b"".join(archive.read(n) for n in archive.namelist()).decode()

    assert "It waited [^1]. Again [^2], and unverified [7]. Code `[1]` stays." in text
    assert "[^1]: survey.pdf, page 3: “The heron waited by the millpond.”" in text
    # A quote over several lines stays whole, its lines indented inside the footnote.
    assert "[^2]: log.pdf, page 9: “The heron waited\n    until dusk.”" in text
    # Numbered through the file: the second answer's first footnote is [^3].
    assert "A second answer [^3]." in text
    assert "[^3]: survey.pdf, page 4: “Second quote.”" in text
    assert text.count("## Question") == 3
    assert "*No answer: The answer could not be written.*" in text  # the failed one


def test_one_conversation_as_markdown_from_its_page_and_the_api(alice, alice_client, book):
    conversation = Conversation.objects.create(owner=alice, notebook=book, title="Ducks/Geese")
    _answer(conversation, "Geese [1].", [_citation(1, file="geese.pdf", page=2, quote="Honk.")])
    _, raw = api_token_create(user=alice, name="script")
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    for client, url in (
        (alice_client, f"/chats/{conversation.pk}/export/"),
        (api, f"/api/conversations/{conversation.pk}/export"),
    ):
        response = client.get(url)
        assert response.status_code == 200
        assert response["Content-Type"] == "text/markdown; charset=utf-8"
        assert 'filename="Ducks_Geese.md"' in response["Content-Disposition"]
        text = response.content.decode()
        assert "Geese [^1]." in text
        assert "[^1]: geese.pdf, page 2: “Honk.”" in text
    page = alice_client.get(f"/chats/{conversation.pk}/").content.decode()
    assert f'href="/chats/{conversation.pk}/export/"' in page


def test_originals_are_byte_identical_and_only_when_asked_for(alice, alice_client, book):
    note = note_create(notebook=book, author=alice, title="Survey")
    first = upload(alice, note, "survey.pdf", text_pdf(["The heron waited."]))
    second = upload(alice, note, "survey.pdf", text_pdf(["Another survey."]))
    Path(second.file.path).write_bytes(os.urandom(3 * BLOCK + 17))  # a large one

    without = _zip(alice_client.get(f"/notebooks/{book.pk}/export/?originals=0"))
    assert not [n for n in without.namelist() if n.startswith("sources/")]

    archive = _zip(alice_client.get(f"/notebooks/{book.pk}/export/?originals=1"))
    sources = sorted(n for n in archive.namelist() if n.startswith("sources/"))
    assert sources == ["sources/survey (2).pdf", "sources/survey.pdf"]
    assert archive.read("sources/survey.pdf") == Path(first.file.path).read_bytes()
    assert archive.read("sources/survey (2).pdf") == Path(second.file.path).read_bytes()
    assert archive.getinfo("sources/survey (2).pdf").compress_type == zipfile.ZIP_STORED


def test_a_large_original_is_written_in_blocks_not_held_whole(alice, tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(4 * BLOCK))
    archive = Archive()
    archive.add_file("sources/big.bin", big, modified=alice.date_joined, kind="source")
    pieces = list(zip_chunks(archive))
    assert len(pieces) >= 4
    assert max(len(p) for p in pieces) <= BLOCK + 1024
    assert zipfile.ZipFile(io.BytesIO(b"".join(pieces))).read("sources/big.bin") == big.read_bytes()


def test_a_file_gone_before_it_is_written_is_left_out_and_named_in_the_readme(alice, tmp_path):
    archive = Archive(readme=lambda written, missing: "gone: " + ",".join(e.path for e in missing))
    archive.add_file("sources/gone.pdf", tmp_path / "gone.pdf", modified=alice.date_joined,
                     kind="source")  # fmt: skip
    unpacked = zipfile.ZipFile(io.BytesIO(b"".join(zip_chunks(archive))))
    assert unpacked.namelist() == ["README.md"]
    assert unpacked.read("README.md") == b"gone: sources/gone.pdf"


def test_guides_become_markdown_with_their_citations_as_footnotes(alice, alice_client, book):
    note = note_create(notebook=book, author=alice, title="Survey")
    source = upload(alice, note, "survey.pdf", text_pdf(["The heron waited."]))
    cited = {"attachment_id": source.pk, "file": "survey.pdf", "page": 2, "quote": "It waited."}
    Guide.objects.create(
        kind="notebook", notebook=book, status="ready", ready_at=book.created_at,
        title="Field notes guide", generator="llm", model="m",
        summary=[{"text": "Herons wait.", "quoted": False, "citations": [cited]}],
        topics=["herons", "ponds"],
    )  # fmt: skip
    Guide.objects.create(
        kind="source", notebook=book, attachment=source, status="ready",
        ready_at=book.created_at, title="Survey", generator="offline",
        summary=[{"text": "It waited.", "quoted": True, "citations": [cited]}],
        outline=[{"text": "Method", "level": 1, "page": 2, "attachment_id": source.pk,
                  "file": "survey.pdf"}],
    )  # fmt: skip
    archive = _zip(alice_client.get(f"/notebooks/{book.pk}/export/"))
    notebook_guide = archive.read("guides/Notebook guide.md").decode()
    assert "Herons wait.[^1]" in notebook_guide
    assert "[^1]: survey.pdf, page 2: “It waited.”" in notebook_guide
    assert "- herons\n- ponds" in notebook_guide
    source_guide = archive.read("guides/survey.pdf.md").decode()
    assert "> “It waited.”[^1]" in source_guide
    assert "- Method (survey.pdf, page 2)" in source_guide


def test_the_api_exports_a_notebook_and_refuses_a_bad_flag(alice, alice_api, alice_client, book):
    note_create(notebook=book, author=alice, title="Heron", body="waits")
    archive = _zip(alice_api.get(f"/api/notebooks/{book.pk}/export?originals=false"))
    assert "notes/Heron.md" in archive.namelist()
    assert alice_api.get(f"/api/notebooks/{book.pk}/export?originals=maybe").status_code == 422
    page = alice_client.get(f"/notebooks/{book.pk}/export/?originals=maybe")
    assert page.status_code == 400
    assert b"originals" in page.content


def test_the_workspace_and_the_list_link_the_export(alice_client, book):
    for url in (f"/notebooks/{book.pk}/", "/"):
        html = alice_client.get(url).content.decode()
        assert f'href="/notebooks/{book.pk}/export/?originals=1"' in html, url
        assert f'href="/notebooks/{book.pk}/export/?originals=0"' in html, url


def test_a_users_whole_export_has_their_notebooks_memories_and_account_without_secrets(
    alice, bob, alice_client
):
    book = notebook_create(owner=alice, title="Field notes")
    note_create(notebook=book, author=alice, title="Heron", body="waits")
    note = note_create(notebook=book, author=alice, title="Survey")
    source = upload(alice, note, "survey.pdf", text_pdf(["The heron waited."]))
    Memory.objects.create(owner=alice, notebook=book, kind="fact", text="Likes herons")
    chat = Conversation.objects.create(owner=alice, notebook=book, title="Herons")
    _answer(chat, "Yes [1].", [_citation(1)])
    token, raw = api_token_create(user=alice, name="backup script")
    notebook_create(owner=bob, title="Bob's secrets")

    archive = _zip(alice_client.get("/settings/export/"))

    names = set(archive.namelist())
    assert {"account.json", "README.md", "notebooks/Field notes/notes/Heron.md",
            "notebooks/Field notes/conversations/Herons.md",
            "notebooks/Field notes/memories.md",
            "notebooks/Field notes/sources/survey.pdf"} <= names  # fmt: skip
    assert (
        archive.read("notebooks/Field notes/sources/survey.pdf")
        == Path(source.file.path).read_bytes()
    )
    assert "Likes herons" in archive.read("notebooks/Field notes/memories.md").decode()
    account = json.loads(archive.read("account.json"))
    assert account["username"] == "alice"
    (listed,) = account["api_tokens"]
    assert listed.pop("created")
    assert listed == {"name": "backup script", "prefix": token.prefix, "last_used": None,
                      "revoked": None}  # fmt: skip
    assert not {"password", "token_hash"} & set(account)
    everything = b"".join(archive.read(n) for n in names)
    alice.refresh_from_db()
    assert alice.password.encode() not in everything  # no password hash
    assert token.token_hash.encode() not in everything
    assert raw.encode() not in everything
    assert b"Bob" not in everything

    lean = _zip(alice_client.get("/settings/export/?originals=0"))
    assert not [n for n in lean.namelist() if "/sources/" in n]
    settings_page = alice_client.get("/settings/").content.decode()
    assert 'href="/settings/export/"' in settings_page
    assert 'href="/settings/delete/"' in settings_page


def test_a_members_export_holds_their_own_part_of_a_shared_notebook_only(alice, bob, alice_client):
    """Bob's notebook shared with Alice: her export has her conversation there and the note
    she wrote, under shared/; nothing of Bob's (his notes, his conversation)."""
    from notes.services import membership_add

    book = notebook_create(owner=bob, title="Team")
    note_create(notebook=book, author=bob, title="Bob's plan", body="bob only")
    membership_add(notebook=book, by=bob, identifier="alice", role="editor")
    note_create(notebook=book, author=alice, title="Alice's minutes", body="minutes")
    hers = Conversation.objects.create(owner=alice, notebook=book, title="Her question")
    _answer(hers, "Yes [1].", [_citation(1)])
    Conversation.objects.create(owner=bob, notebook=book, title="Bob's chat")

    archive = _zip(alice_client.get("/settings/export/"))
    names = set(archive.namelist())
    assert {"shared/Team/conversations/Her question.md",
            "shared/Team/notes/Alice's minutes.md"} <= names  # fmt: skip
    everything = b"".join(archive.read(n) for n in names)
    assert b"bob only" not in everything
    assert b"Bob's chat" not in everything
    # As a member she exports the notebook itself too: its notes, her conversations only.
    notebook_zip = _zip(alice_client.get(f"/notebooks/{book.pk}/export/"))
    assert "notes/Bob's plan.md" in notebook_zip.namelist()
    assert not [n for n in notebook_zip.namelist() if "Bob's chat" in n]
