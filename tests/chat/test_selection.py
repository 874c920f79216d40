"""Chosen sources: chips and exclusions are parsed strictly, resolved against the user, merged
with carry-over (design §7), stored on the question, and the answer uses only what they allow.
Answers come from the offline answerer over the samples (text.pdf, other.pdf), ingested for real."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from chat import selection, services
from chat.agent import generate
from chat.models import Conversation, Message
from chat.selection import FOLDER_MAX, FOLDER_WARN, Chip, merge, parse
from notes.models import Note
from notes.services import note_create
from tests.factories import NotebookFactory
from tests.fixtures.documents import ingest, upload

# text.pdf (herons, kingfishers, otters) answers the first; other.pdf (sourdough) the second.
HERON_QUESTION = "Where does the grey heron wait motionless until dusk?"
BREAD_QUESTION = "What should I feed the sourdough starter every morning?"


# --- parsing and merging (no database) --------------------------------------------------------


def test_nothing_sent_is_no_selection_and_junk_is_refused():
    assert parse(None, None).chips == []
    assert parse("", "").excluded == []
    assert parse([], []).chips == []
    for selections, excluded in [
        ("{not json", ""),
        ('{"kind": "file"}', ""),  # an object, not a list
        ('[{"kind": "file", "ref": "user:1"}]', ""),
        ('[{"kind": "folder", "ref": "note:1"}]', ""),
        ("", '["user:3"]'),  # only sources and folders can be excluded
        ("", '["attachment:1; DROP TABLE"]'),
        (json.dumps([{"kind": "file", "ref": f"note:{n}"} for n in range(1, 60)]), ""),
    ]:
        with pytest.raises(ValidationError, match="could not be read"):
            parse(selections, excluded)


def test_exclusions_are_deduplicated_in_order():
    chips = parse('[{"kind": "path", "mode": "all", "ref": "notebook:2"}]',
                  '["note:3", "attachment:5", "note:3"]')  # fmt: skip
    assert chips.chips[0].ref == "notebook:2"
    assert chips.excluded == ["note:3", "attachment:5"]


def test_without_chips_or_exclusions_the_chats_own_scope_applies():
    assert merge(explicit=set(), excluded=set(), carried={"attachment:1"}, default=set()) is None


def test_chips_are_merged_with_carry_over_deduplicated_minus_exclusions():
    merged = merge(
        explicit={"attachment:1", "note:2"},
        excluded={"attachment:9"},
        carried={"attachment:1", "attachment:7", "attachment:9"},
        default=None,
    )
    assert merged is not None
    assert merged.attachments == {1, 7}
    assert merged.notes == {2}
    assert merged.summary() == {"explicit_selected_count": 2, "carried_over_count": 1,
                                "excluded_count": 1, "source_count": 3}  # fmt: skip


def test_an_excluded_chip_source_is_used_by_nothing():
    merged = merge(explicit={"attachment:1", "attachment:2"}, excluded={"attachment:2"},
                   carried={"attachment:2"}, default=None)  # fmt: skip
    assert merged is not None
    assert merged.attachments == {1}
    assert merged.summary()["explicit_selected_count"] == 1


def test_exclusions_without_chips_narrow_the_chats_own_scope():
    merged = merge(explicit=set(), excluded={"attachment:2"}, carried={"attachment:5"},
                   default={"attachment:1", "attachment:2", "note:4"})  # fmt: skip
    assert merged is not None
    assert merged.attachments == {1}
    assert merged.notes == {4}


# --- resolving against the user ---------------------------------------------------------------


pytest_db = pytest.mark.django_db


@pytest_db
def test_a_folder_over_the_warning_size_is_allowed_with_a_warning_and_over_the_limit_refused(
    alice,
):
    notebook = NotebookFactory.create(owner=alice, title="Big")
    Note.objects.bulk_create(
        Note(notebook=notebook, author=alice, title=f"n{i}") for i in range(FOLDER_WARN + 1)
    )
    chip = Chip(kind="path", mode="all", ref=f"notebook:{notebook.pk}")
    resolved = selection.resolve(user=alice, chip=chip)
    assert resolved.subfile_count == FOLDER_WARN + 1
    assert "16 sources" in resolved.warning
    assert resolved.stored()["warning"] == resolved.warning
    assert resolved.url == f"/notebooks/{notebook.pk}/"

    exactly = NotebookFactory.create(owner=alice, title="Exactly")
    Note.objects.bulk_create(
        Note(notebook=exactly, author=alice, title=f"n{i}") for i in range(FOLDER_WARN)
    )
    chip = Chip(kind="path", mode="all", ref=f"notebook:{exactly.pk}")
    assert selection.resolve(user=alice, chip=chip).warning == ""

    Note.objects.bulk_create(
        Note(notebook=notebook, author=alice, title=f"m{i}")
        for i in range(FOLDER_MAX - FOLDER_WARN)
    )
    with pytest.raises(ValidationError, match="more than the 200"):
        selection.resolve(user=alice, chip=Chip(kind="path", ref=f"notebook:{notebook.pk}"))


@pytest_db
def test_an_excluded_folder_stands_for_its_sources_but_those_chosen_again(alice, bob):
    notebook = NotebookFactory.create(owner=alice)
    one = note_create(notebook=notebook, author=alice, title="One", body="text")
    two = note_create(notebook=notebook, author=alice, title="Two", body="text")
    theirs = NotebookFactory.create(owner=bob)
    note_create(notebook=theirs, author=bob, title="Theirs", body="text")
    refs = [f"notebook:{notebook.pk}", f"notebook:{theirs.pk}", "attachment:7"]
    excluded = selection.excluded_sources(user=alice, refs=refs, chosen={f"note:{one.pk}"})
    assert excluded == {f"note:{two.pk}", "attachment:7"}


@pytest_db
def test_a_markdown_folder_holds_only_its_live_notes(alice):
    notebook = NotebookFactory.create(owner=alice)
    kept = note_create(notebook=notebook, author=alice, title="Kept", body="text")
    gone = note_create(notebook=notebook, author=alice, title="Gone", body="text")
    Note.objects.filter(pk=gone.pk).update(trashed_at="2026-01-01T00:00:00Z")
    chip = Chip(kind="path", mode="markdown", ref=f"notebook:{notebook.pk}")
    assert selection.resolve(user=alice, chip=chip).source_ids == [f"note:{kept.pk}"]


@pytest_db
def test_another_users_sources_are_refused_and_nothing_is_saved(alice, bob):
    mine = NotebookFactory.create(owner=alice)
    note_create(notebook=mine, author=alice, title="Mine", body="Colons and slashes.")
    theirs = NotebookFactory.create(owner=bob, title="Bob's secret notebook")
    their_note = note_create(notebook=theirs, author=bob, title="Secret", body="Hidden text.")
    conversation = services.conversation_create(owner=alice, notebook=mine)
    for ref in (f"notebook:{theirs.pk}", f"note:{their_note.pk}", "attachment:999999"):
        chips = json.dumps([{"kind": "file", "ref": ref, "name": "x"}])
        with pytest.raises(ValidationError) as refused:
            services.message_ask(conversation=conversation, content="Colons?", selections=chips)
        assert "no longer available" in str(refused.value)
        assert "Bob" not in str(refused.value)
        assert "Secret" not in str(refused.value)
    assert not Message.objects.filter(conversation=conversation).exists()


@pytest_db
def test_older_questions_without_the_new_fields_still_load(alice):
    notebook = NotebookFactory.create(owner=alice)
    conversation = Conversation.objects.create(owner=alice, notebook=notebook, title="Old")
    old = Message.objects.create(conversation=conversation, role="user", content="Old question")
    assert selection.stored_selections(old) == []
    assert selection.stored_excluded(old) == []
    assert selection.state(conversation) == {"selections": [], "excluded": [], "warning": ""}
    assert selection.prepare(conversation=conversation, asked=old, follow_up=True) is None
    # Partial or hand-edited items: what can be read is, the rest is skipped.
    old.explicit_selections = [{"ref": "note:4"}, "junk", {"kind": "file"}, {"ref": "note:5",
                               "source_ids": ["note:5", 7], "mode": "weird"}]  # fmt: skip
    old.excluded_sources = ["attachment:2", None]
    stored = selection.stored_selections(old)
    assert [s["ref"] for s in stored] == ["note:4", "note:5"]
    assert stored[1]["source_ids"] == ["note:5"]
    assert stored[1]["mode"] == "all"
    assert selection.stored_excluded(old) == ["attachment:2"]


# --- answers from the chosen sources (the samples, the offline answerer) ------------------------


@pytest.fixture
def library(alice):
    """One notebook, two notes, each with a sample PDF: text.pdf (wildlife) and other.pdf
    (bread)."""
    notebook = NotebookFactory.create(owner=alice, title="Field notes")
    wildlife = note_create(notebook=notebook, author=alice, title="Wildlife")
    baking = note_create(notebook=notebook, author=alice, title="Baking")
    text = ingest(upload(alice, wildlife, "text.pdf"))
    other = ingest(upload(alice, baking, "other.pdf"))
    assert text.status == other.status == "ready"
    return {"notebook": notebook, "text": text, "other": other}


def ask(conversation: Conversation, question: str, chips=(), excluded=()) -> Message:
    selections = [{"kind": "file", "mode": "all", "ref": ref} for ref in chips]
    _, pending = services.message_ask(
        conversation=conversation, content=question, selections=json.dumps(selections),
        excluded=json.dumps(list(excluded)),
    )  # fmt: skip
    done = generate(pending.pk, lambda event, data: None)
    assert done is not None
    assert done.status == "complete", done.error
    return done


def cited_files(answer: Message) -> set[int]:
    return {c["attachment_id"] for c in answer.citations if c.get("attachment_id")}


@pytest_db
def test_a_question_with_a_chip_answers_from_that_source_only(alice, library):
    text, other = library["text"], library["other"]
    chat = services.conversation_create(owner=alice, notebook=library["notebook"])
    unchosen = ask(chat, HERON_QUESTION)
    assert text.pk in cited_files(unchosen)  # the notebook's scope finds text.pdf

    chat = services.conversation_create(owner=alice, notebook=library["notebook"])
    chosen = ask(chat, HERON_QUESTION, chips=[f"attachment:{other.pk}"])
    assert text.pk not in cited_files(chosen)
    assert {p["attachment_id"] for p in chosen.retrieved if "attachment_id" in p} <= {other.pk}
    question = chosen.reply_to
    assert question is not None
    assert question.explicit_selections[0]["source_ids"] == [f"attachment:{other.pk}"]
    assert question.explicit_selections[0]["subfile_count"] == 1
    assert question.explicit_selections[0]["name"] == "other.pdf"
    assert chosen.metadata["source_summary"]["explicit_selected_count"] == 1

    on_topic = ask(chat, BREAD_QUESTION, chips=[f"attachment:{other.pk}"])
    assert cited_files(on_topic) == {other.pk}

    # No chips, text.pdf unticked in the sources pane: the notebook's scope without it.
    chat = services.conversation_create(owner=alice, notebook=library["notebook"])
    unticked = ask(chat, HERON_QUESTION, excluded=[f"attachment:{text.pk}"])
    assert text.pk not in cited_files(unticked)
    assert all(p.get("attachment_id") != text.pk for p in unticked.retrieved)


@pytest_db
def test_carry_over_follows_up_with_earlier_sources_unless_their_chip_was_removed(alice, library):
    text, other = library["text"], library["other"]
    chat = services.conversation_create(owner=alice, notebook=library["notebook"])
    first = ask(chat, HERON_QUESTION, chips=[f"attachment:{text.pk}"])
    assert cited_files(first) == {text.pk}

    # The follow-up names another source: the first answer's source carries over.
    kept = ask(chat, "And what about the kingfishers?", chips=[f"attachment:{other.pk}"])
    assert kept.reply_to is not None
    assert kept.reply_to.is_follow_up
    assert kept.metadata["source_summary"]["carried_over_count"] == 1

    # The user removed text.pdf's chip (it is excluded): the next follow-up never uses it.
    dropped = ask(chat, "And what about the otters?", chips=[f"attachment:{other.pk}"],
                  excluded=[f"attachment:{text.pk}"])  # fmt: skip
    assert dropped.reply_to is not None
    assert dropped.reply_to.is_follow_up
    assert text.pk not in cited_files(dropped)
    assert all(p.get("attachment_id") != text.pk for p in dropped.retrieved)
    assert dropped.metadata["source_summary"]["carried_over_count"] == 0
    assert dropped.reply_to.excluded_sources == [f"attachment:{text.pk}"]
    # What the composer starts from next: the latest question's chips and exclusions.
    state = selection.state(chat)
    assert [c["ref"] for c in state["selections"]] == [f"attachment:{other.pk}"]
    assert state["excluded"] == [f"attachment:{text.pk}"]


@pytest_db
def test_ask_this_pdf_is_a_chat_about_that_file_only(alice, bob, client, library):
    text, other = library["text"], library["other"]
    client.force_login(alice)
    response = client.post(f"/attachments/{other.pk}/ask/")
    chat = Conversation.objects.get(owner=alice, attachment=other)
    assert response.status_code == 302
    assert response["Location"] == f"/notebooks/{library['notebook'].pk}/?c={chat.pk}"
    assert chat.title == "other.pdf"
    assert chat.note_id == other.note_id
    answer = ask(chat, HERON_QUESTION)
    assert text.pk not in cited_files(answer)
    assert {p.get("attachment_id") for p in answer.retrieved} <= {other.pk}
    question = ask(chat, BREAD_QUESTION).reply_to
    assert question is not None
    assert question.conversation.title == "other.pdf"

    client.force_login(bob)
    assert client.post(f"/attachments/{other.pk}/ask/").status_code == 404
    assert not Conversation.objects.filter(owner=bob).exists()


@pytest_db
def test_when_search_finds_nothing_in_the_chosen_sources_their_opening_passages_stand_in(
    alice, monkeypatch
):
    from chat.tools import AnswerRequest, builtin, tools_for
    from search.retrieval import SearchResult

    notebook = NotebookFactory.create(owner=alice)
    note = note_create(notebook=notebook, author=alice, title="Wildlife")
    text = ingest(upload(alice, note, "text.pdf"))
    monkeypatch.setattr(builtin, "search", lambda **kwargs: SearchResult([]))
    plain = AnswerRequest(user=alice, notebook=notebook)
    tool = {t.name: t for t in tools_for(plain)}["document_search"]
    assert tool.run(plain, {"query": "summarise"}).passages == []  # no choice: nothing

    chosen = selection.SourceSet.of({f"attachment:{text.pk}"}, explicit={f"attachment:{text.pk}"})
    context = AnswerRequest(user=alice, notebook=notebook, selection=chosen)
    passages = tool.run(context, {"query": "summarise", "limit": 3}).passages
    first = text.chunks.order_by("page_number", "index")[:3]
    assert [p["chunk_id"] for p in passages] == [c.pk for c in first]
