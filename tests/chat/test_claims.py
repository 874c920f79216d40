"""Claims, not answers, are checked (chat.claims): each sentence of a model's answer must be
backed by the passage it cites, over a really ingested PDF, with the model faked at its HTTP
boundary (tests/fake_chat.py, the embellish profile among others)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.template.loader import render_to_string

from chat.agent import generate
from chat.claims import CLOSE, OPEN, segments
from chat.models import Message
from chat.reformulation import in_context
from chat.rendering import present
from chat.saving import answer_markdown, answer_save_to_note
from chat.services import conversation_create, message_ask
from core.llm import forget_servers
from grounding.citations import MARKER
from tests.factories import NotebookFactory, NoteFactory
from tests.fake_chat import (
    EMBELLISH,
    Answer,
    Metadata,
    fake_chat_server,
    first_sentence,
    sources_in,
)
from tests.fake_openai import fake_openai_server
from tests.fixtures.documents import ingest, upload

QUESTION = "What does Lantern do?"  # manual.pdf's first sentence says


@pytest.fixture(autouse=True)
def embeddings(settings):
    """Remote embeddings from a local fake: the real pipeline, without a CPU-bound model."""
    with fake_openai_server(dims=384) as server:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_BASE_URL = server.url
        settings.EMBEDDING_MODEL = "fake-embed"
        yield server


@pytest.fixture
def model(settings):
    def serve(profile: str):
        forget_servers()
        server = fake_chat_server(profile)
        state = server.__enter__()
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{state.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        opened.append(server)
        return state

    opened: list[Any] = []
    yield serve
    for server in opened:
        server.__exit__(None, None, None)
    forget_servers()


@pytest.fixture
def conversation(alice):
    notebook = NotebookFactory.create(owner=alice, title="Tools")
    note = NoteFactory.create(notebook=notebook, title="Lantern", body="Reading notes.")
    attachment = ingest(upload(alice, note, "manual.pdf"))  # tests/samples/
    assert attachment.status == "ready", attachment.error
    return conversation_create(owner=alice, notebook=notebook)


def ask(conversation, question: str = QUESTION) -> Message:
    _, answer = message_ask(conversation=conversation, content=question)
    message = generate(answer.pk, emit=lambda *_: None)
    assert message is not None
    assert message.status == Message.Status.COMPLETE, message.error
    return message


def html_of(message: Message) -> str:
    return render_to_string("chat/_message.html", {"item": present(message)})


def test_an_answer_is_cut_into_sentences_where_they_are_written():
    text = (
        "A first claim about packages, page 33. [1]\n"
        "Another claim follows here [2].\n\n"
        "## A heading\n\n"
        "- An item says **bold** things [1]. A second sentence of it.\n\n"
        "```\ncode. Not a claim.\n```\n\n"
        "| a | b |\n|---|---|\n| cell one | cell two [1] |\n"
    )
    found = segments(text)
    assert [c.text for c in found] == [
        "A first claim about packages, page 33. [1]",
        "Another claim follows here [2].",
        "An item says **bold** things [1].",
        "A second sentence of it.",
        "cell one | cell two [1]",
    ]
    assert all(text[c.start : c.end] == c.text for c in found)
    assert [c.cites for c in found] == [[1], [2], [1], [], [1]]


@pytest.mark.django_db
def test_a_fabricated_claim_citing_a_true_source_loses_its_chip_and_is_marked(model, conversation):
    """The embellish profile: one true sentence of source 1 quoted, then invented claims
    citing [1] (one dressed in the true sentence's words), with "high" confidence."""
    fake = model(EMBELLISH)
    message = ask(conversation)
    claims = message.metadata["claims"]
    assert (claims["sentences"], claims["backed"]) == (3, 1)
    assert [row["text"] for row in claims["unbacked"]] == [
        message.content[row["start"] : row["end"]] for row in claims["unbacked"]
    ]
    assert all("Napoleon" in row["text"] for row in claims["unbacked"])
    assert not any(MARKER.search(row["text"]) for row in claims["unbacked"])
    # The true sentence keeps its verified chip; the invented ones have none.
    assert message.metadata["grounding"] == "cited"
    assert [c["n"] for c in message.citations] == [1]
    assert message.content.count("[1]") == 1
    assert message.confidence == "medium"  # "high" only when every sentence is backed
    html = html_of(message)
    assert html.count('data-testid="claim-unbacked"') == 2
    assert html.count('data-testid="citation-chip"') == 1
    assert "2 sentences are not backed by your sources" in html
    assert html.index('data-testid="partly-unbacked"') < html.index('data-testid="answer"')
    assert "High confidence" not in html
    assert OPEN not in html
    assert CLOSE not in html
    assert fake.streamed  # the model did answer


@pytest.mark.django_db
def test_a_sentence_copied_from_the_cited_passage_is_backed(model, conversation):
    model("strict")
    message = ask(conversation)
    claims = message.metadata["claims"]
    assert claims["sentences"] >= 1
    assert claims["backed"] == claims["sentences"]
    assert claims["unbacked"] == []
    assert 'data-testid="claim-unbacked"' not in html_of(message)


@pytest.mark.django_db
def test_an_unmarked_factual_sentence_is_marked_too(model, conversation):
    fake = model("friendly")

    def respond(body: dict[str, Any]) -> Any:
        sentence = first_sentence(sources_in(body["messages"][-1]["content"]).get(1, ""))
        if not body.get("stream"):
            return Metadata({"confidence": "high", "follow_ups": [], "answerable": True,
                             "citations": [{"n": 1, "quote": sentence}]})  # fmt: skip
        return Answer(f"{sentence} [1] The Eiffel Tower was painted green by Gustave Courbet.")

    fake.respond = respond
    message = ask(conversation)
    claims = message.metadata["claims"]
    assert (claims["sentences"], claims["backed"]) == (2, 1)
    assert "Courbet" in claims["unbacked"][0]["text"]
    assert message.confidence == "medium"
    assert "1 sentence is not backed by your sources" in html_of(message)


@pytest.mark.django_db
def test_an_answer_with_nothing_backed_warns_above_its_text_and_is_not_offered_for_a_note(
    model, conversation, alice
):
    fake = model("friendly")
    fake.script = [
        Answer("Napoleon Bonaparte wrote the package in 1805 on Elba [1]."),
        Metadata(
            {
                "confidence": "high",
                "follow_ups": [],
                "answerable": True,
                "citations": [{"n": 1, "quote": "Lantern"}],
            }
        ),
    ]
    message = ask(conversation)
    assert message.metadata["grounding"] == "unsourced"
    assert message.confidence == ""
    html = html_of(message)
    assert html.index('data-testid="unsourced"') < html.index('data-testid="answer"')
    assert 'data-testid="save-to-note"' not in html
    with pytest.raises(ValidationError):
        answer_save_to_note(user=alice, answer=message)


@pytest.mark.django_db
def test_a_saved_answer_keeps_the_marks_of_its_unbacked_sentences(model, conversation, alice):
    model(EMBELLISH)
    message = ask(conversation)
    markdown = answer_markdown(message)
    assert markdown.count("*(not found in the sources)*") == 2
    note = answer_save_to_note(user=alice, answer=message)
    assert note.body.count("not found in the sources") == 2


@pytest.mark.django_db
def test_a_follow_up_never_searches_with_words_of_an_unbacked_sentence(model, conversation):
    fake = model("friendly")
    fake.script = [
        Answer("Use \\napoleonpath to print it; it came from Bonaparte_Tools [1]."),
        Metadata(
            {
                "confidence": "high",
                "follow_ups": [],
                "answerable": True,
                "citations": [{"n": 1, "quote": "Lantern"}],
            }
        ),
    ]
    answer = ask(conversation)
    assert answer.metadata["grounding"] == "unsourced"
    assert answer.reply_to is not None
    question = Message.objects.create(
        conversation=conversation, role=Message.Role.USER, content="And how do I use it?"
    )
    found = in_context(question.content, [answer, answer.reply_to])
    assert found.is_follow_up
    assert found.query == "And how do I use it?"
    assert "napoleonpath" not in found.context_text.lower()
    assert "bonaparte" not in found.context_text.lower()
    # The rewrite by a model sees no unbacked sentence either.
    from chat.reformulation import _transcript

    assert "Bonaparte" not in _transcript([answer, answer.reply_to])


@pytest.mark.django_db
def test_the_api_returns_each_answers_grounding_by_sentence(model, conversation, alice, client):
    model(EMBELLISH)
    message = ask(conversation)
    client.force_login(alice)
    data = client.get(f"/api/conversations/{conversation.pk}/messages").json()
    rows = data if isinstance(data, list) else data.get("items", data)
    answer = next(m for m in rows if m["id"] == message.pk)
    claims = answer["metadata"]["claims"]
    assert (claims["sentences"], claims["backed"], len(claims["unbacked"])) == (3, 1, 2)


def test_a_claim_is_read_in_the_language_of_its_sources(settings):
    """A claim too short to tell its language is stemmed as its German source is: read as the
    site's English it kept "tabellen" against the source's "tabell", and was never backed."""
    from chat.claims import judge

    settings.LANGUAGE_CODE = "en"
    source = "Die Tabellen haben drei Spalten und eine Überschrift über allen Zeilen."
    (claim,) = judge("Tabellen, Spalten [1].", [{"n": 1, "kind": "note", "text": source}])
    assert claim.backed
