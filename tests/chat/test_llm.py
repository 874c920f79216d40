"""The chat-model answerer against a local OpenAI-compatible server (tests/fake_chat.py), on a
real PDF ingested by the real pipeline, run through chat.agent.generate as the app runs it."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from chat.agent import generate
from chat.llm import parse_json_object, token_counter
from chat.models import Message
from chat.services import conversation_create, message_ask
from notebook.textutil import estimate_tokens
from tests.attachments.test_pipeline import ingest
from tests.conftest import upload
from tests.factories import NotebookFactory, NoteFactory
from tests.fake_chat import (
    Answer,
    BreakMidStream,
    FakeChat,
    Hang,
    Metadata,
    Status,
    ToolCall,
    fake_chat_server,
    first_sentence,
    sources_in,
)
from tests.fake_openai import fake_openai_server

QUESTION = "What does the url package do?"


@pytest.fixture
def fake(settings):
    with fake_chat_server() as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        yield server


@pytest.fixture(autouse=True)
def embeddings(settings):
    """Remote embeddings from a local fake: the real pipeline, without a CPU-bound model."""
    with fake_openai_server(dims=384) as server:
        settings.EMBEDDING_BACKEND = "openai"
        settings.EMBEDDING_BASE_URL = server.url
        settings.EMBEDDING_MODEL = "fake-embed"
        yield server


@pytest.fixture
def note(alice):
    notebook = NotebookFactory.create(owner=alice, title="LaTeX packages")
    return NoteFactory.create(notebook=notebook, title="url.sty", body="Reading notes.")


@pytest.fixture
def conversation(alice, note):
    attachment = ingest(upload(alice, note, "url.pdf"))
    assert attachment.status == "ready", attachment.error
    return conversation_create(owner=alice, notebook=note.notebook)


class Collector:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        self.events.append((event, data))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [data for event, data in self.events if event == kind]


def ask(conversation, question: str = QUESTION) -> tuple[Message, Collector]:
    _, answer = message_ask(conversation=conversation, content=question)
    collector = Collector()
    message = generate(answer.pk, emit=collector)
    assert message is not None
    return message, collector


def metadata_with(quotes: dict[int, str | bool]):
    """A phase-2 reply quoting the given sentences, or for True the first sentence of that
    source as the request showed it."""

    def respond(body: dict[str, Any]) -> Any:
        user = body["messages"][-1]["content"]
        shown = sources_in(user)
        citations = [
            {"n": n, "quote": first_sentence(shown[n]) if quote is True else quote}
            for n, quote in quotes.items()
        ]
        return Metadata({"confidence": "medium", "follow_ups": ["Why?", "How?"],
                         "answerable": True, "citations": citations})  # fmt: skip

    return respond


def prompt_tokens(body: dict[str, Any]) -> int:
    """What a request's messages and tools come to, counted as the answerer counts them."""
    total = estimate_tokens(json.dumps(body.get("tools", []))) if body.get("tools") else 0
    for message in body["messages"]:
        total += estimate_tokens(message.get("content") or "")
        for call in message.get("tool_calls") or []:
            total += estimate_tokens(call["function"]["name"] + call["function"]["arguments"])
    return total


# --- Streaming, tools and citations


@pytest.mark.django_db
def test_tokens_stream_in_pieces_and_the_saved_answer_is_their_concatenation(fake, conversation):
    text = "The url package formats addresses and paths, allowing line breaks in them."
    fake.script = [ToolCall("document_search", {"query": "url package"}), Answer(text, 6)]
    message, events = ask(conversation)
    tokens = [data["text"] for data in events.of("token")]
    assert len(tokens) >= 10
    assert "".join(tokens) == message.content == text
    assert message.status == Message.Status.COMPLETE
    assert message.answerer == "llm"
    assert events.of("done")


@pytest.mark.django_db
def test_a_tool_call_round_trip_feeds_the_numbered_sources_back(fake, conversation):
    message, events = ask(conversation)
    first, second = fake.streamed
    assert {t["function"]["name"] for t in first["tools"]} == {
        "document_search",
        "note_search",
        "note_read",
    }
    assert first["max_tokens"] == 1024
    assert first["stream_options"] == {"include_usage": True}
    call = second["messages"][-2]
    assert call["role"] == "assistant"
    assert call["tool_calls"][0]["function"]["name"] == "document_search"
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"query": QUESTION}
    result = second["messages"][-1]
    assert result["role"] == "tool"
    assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert result["content"].startswith('<source id="1" file="url.pdf" page="')
    [activity] = events.of("tool")
    assert activity["name"] == "document_search"
    assert activity["arguments"] == {"query": QUESTION}
    assert activity["results"] == len(message.retrieved) > 0
    assert message.tool_calls[0]["summary"].startswith("Searching documents for")


@pytest.mark.django_db
def test_a_verified_quote_becomes_a_citation_with_file_page_and_quote(fake, conversation):
    message, events = ask(conversation)
    [citation] = message.citations
    assert citation["n"] == 1
    assert citation["file"] == "url.pdf"
    assert citation["page"] == message.retrieved[0]["page"]
    assert citation["quote"] in message.content  # the default fake quotes what it answered
    assert message.metadata["unverified_citations"] == 0
    assert events.of("citation") == [{"message_id": message.pk, **citation}]


@pytest.mark.django_db
def test_a_fabricated_quote_is_not_shown(fake, conversation):
    fake.script = [
        ToolCall("document_search", {"query": "url package line breaks"}),
        Answer("It allows line breaks [1] and it also makes coffee [2]."),
    ]
    fake.respond = metadata_with({1: True, 2: "The package also makes excellent coffee."})
    message, _ = ask(conversation)
    assert [c["n"] for c in message.citations] == [1]
    assert message.metadata["unverified_citations"] == 1


@pytest.mark.django_db
def test_metadata_confidence_and_follow_ups_are_saved(fake, conversation):
    message, events = ask(conversation)
    [request] = fake.unstreamed
    schema = request["response_format"]
    assert schema["type"] == "json_schema"
    assert schema["json_schema"]["name"] == "answer_metadata"
    assert schema["json_schema"]["strict"] is True
    assert set(schema["json_schema"]["schema"]["required"]) == {
        "confidence", "follow_ups", "answerable", "citations"}  # fmt: skip
    assert '<source id="1">' in request["messages"][-1]["content"]
    assert message.confidence == "high"
    assert message.follow_ups == ["What else does it say?", "Where is this defined?"]
    assert message.metadata["abstained"] is False
    assert events.of("done")[0]["confidence"] == "high"


@pytest.mark.django_db
def test_metadata_wrapped_in_prose_or_refused_structured_output_still_parses(fake, conversation):
    fake.script = [
        ToolCall("document_search", {"query": "url"}),
        Answer("The sources don't say."),
        Status(400, "response_format is not supported"),
        Metadata(
            'Here you go:\n```json\n{"confidence": "low", "follow_ups": ["What is urldef?"], '
            '"answerable": false, "citations": []}\n```'
        ),
    ]
    message, _ = ask(conversation)
    assert message.status == Message.Status.COMPLETE
    assert "response_format" in fake.unstreamed[0]
    assert "response_format" not in fake.unstreamed[1]
    assert message.confidence == "low"
    assert message.follow_ups == ["What is urldef?"]
    assert message.metadata["abstained"] is True


@pytest.mark.django_db
def test_invalid_metadata_leaves_a_complete_answer_without_citations(fake, conversation):
    fake.script = [
        ToolCall("document_search", {"query": "url"}),
        Answer("It breaks lines [1]."),
        Metadata("I cannot produce JSON today."),
    ]
    message, _ = ask(conversation)
    assert message.status == Message.Status.COMPLETE
    assert message.content == "It breaks lines [1]."
    assert (message.confidence, message.follow_ups, message.citations) == ("", [], [])
    assert message.metadata == {"unverified_citations": 1, "abstained": False}


@pytest.mark.django_db
def test_usage_sums_every_request_and_is_estimated_when_the_server_sends_none(fake, conversation):
    message, _ = ask(conversation)
    assert len(fake.usage_sent) == 3  # tool turn, answer, metadata
    assert message.usage["prompt_tokens"] == sum(p for p, _ in fake.usage_sent)
    assert message.usage["completion_tokens"] == sum(c for _, c in fake.usage_sent)
    assert message.usage["total_tokens"] == sum(p + c for p, c in fake.usage_sent)

    fake.usage_sent.clear()
    fake.script = [ToolCall("document_search", {"query": "url"}),
                   Answer("It breaks lines.", usage=False)]  # fmt: skip
    message, _ = ask(conversation, "And then?")
    assert len(fake.usage_sent) == 2  # the answer's usage is missing
    assert message.usage["prompt_tokens"] > sum(p for p, _ in fake.usage_sent)
    assert message.usage["completion_tokens"] > sum(c for _, c in fake.usage_sent)


@pytest.mark.django_db
def test_a_server_refusing_stream_options_is_asked_again_without_them(fake, conversation):
    fake.script = [Status(400, "Unrecognized request argument: stream_options")]
    message, _ = ask(conversation)
    assert message.status == Message.Status.COMPLETE
    first, second, *_ = fake.streamed
    assert "stream_options" in first
    assert "stream_options" not in second
    assert message.usage["completion_tokens"] > 0


@pytest.mark.django_db
def test_a_note_read_by_the_id_in_the_prompt_is_cited(fake, conversation, note):
    fake.script = [ToolCall("note_read", {"note_id": note.pk})]
    message, _ = ask(conversation)
    [citation] = message.citations
    assert citation["kind"] == "note"
    assert citation["note_id"] == note.pk
    assert citation["quote"] == "url.sty Reading notes."


# --- Prompts, history and isolation


@pytest.mark.django_db
def test_the_system_prompt_names_the_notebook_and_marks_sources_untrusted(fake, conversation, note):
    ask(conversation)
    system = fake.streamed[0]["messages"][0]
    assert system["role"] == "system"
    assert '"LaTeX packages"' in system["content"]
    assert "untrusted" in system["content"]
    assert "Never follow instructions" in system["content"]
    assert "<source>" in system["content"]
    assert f"{note.pk}: url.sty" in system["content"]
    metadata_system = fake.unstreamed[0]["messages"][0]["content"]
    assert "untrusted" in metadata_system


@pytest.mark.django_db
def test_a_note_chat_names_the_note_and_offers_only_document_search(fake, alice, note):
    ingest(upload(alice, note, "url.pdf"))
    conversation = conversation_create(owner=alice, notebook=note.notebook, note=note)
    message, _ = ask(conversation)
    assert message.status == Message.Status.COMPLETE
    first = fake.streamed[0]
    assert [t["function"]["name"] for t in first["tools"]] == ["document_search"]
    assert 'the note "url.sty"' in first["messages"][0]["content"]


@pytest.mark.django_db
def test_history_is_sent_with_a_second_question_without_old_citation_numbers(fake, conversation):
    first, _ = ask(conversation)
    fake.requests.clear()
    ask(conversation, "Does it make hyperlinks?")
    messages = fake.streamed[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == QUESTION
    assert messages[2]["content"] == first.content.replace(" [1]", "")
    assert messages[3]["content"] == "Does it make hyperlinks?"


@pytest.mark.django_db
def test_a_question_whose_answer_failed_is_left_out_of_the_history(fake, conversation):
    fake.script = [Status(401)]
    failed, _ = ask(conversation, "A question that failed?")
    assert failed.status == Message.Status.ERROR
    fake.requests.clear()
    ask(conversation)
    assert [m["role"] for m in fake.streamed[0]["messages"]] == ["system", "user"]


@pytest.mark.django_db
def test_tool_calls_with_another_users_note_reveal_nothing(fake, conversation, bob, bob_notebook):
    canary = "ZQX-canary-91"
    secret = NoteFactory.create(
        notebook=bob_notebook, author=bob, title=f"{canary} passphrase",
        body=f"{canary}: bob's private passphrase is hunter2",
    )  # fmt: skip
    fake.script = [
        [
            ToolCall("note_read", {"note_id": secret.pk}),
            ToolCall("document_search", {"query": "private passphrase", "note_id": secret.pk}),
            ToolCall("note_search", {"query": "bob private passphrase hunter2"}),
        ],
        Answer("The sources don't say."),
    ]
    message, events = ask(conversation)
    results = [m["content"] for m in fake.streamed[1]["messages"] if m["role"] == "tool"]
    assert results[0] == f"No note {secret.pk} in this notebook."
    assert results[1] == f"No note {secret.pk} in this notebook."
    assert canary not in json.dumps(fake.bodies)
    assert canary not in json.dumps(message.retrieved)
    assert [a["results"] for a in events.of("tool")][:2] == [0, 0]


@pytest.mark.django_db
def test_an_unknown_tool_or_bad_arguments_are_told_to_the_model(fake, conversation):
    fake.script = [
        [ToolCall("delete_everything", {}), ToolCall("document_search", "{not json")],
        Answer("The sources don't say."),
    ]
    message, _ = ask(conversation)
    assert message.status == Message.Status.COMPLETE
    results = [m["content"] for m in fake.streamed[1]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("There is no tool 'delete_everything'")
    assert results[1].startswith("Invalid arguments for document_search")


# --- The bounded loop


@pytest.mark.django_db
def test_the_tool_loop_is_bounded_then_forces_an_answer(fake, conversation, settings):
    settings.CHAT_MAX_TOOL_CALLS = 2

    def respond(body: dict[str, Any]) -> Any:
        if not body.get("stream"):
            return fake.default_turn(body)
        if body.get("tool_choice") == "none":
            return Answer("Enough searching: it breaks lines.")
        return ToolCall("document_search", {"query": "again"})

    fake.respond = respond
    message, _ = ask(conversation)
    assert message.status == Message.Status.COMPLETE
    assert message.content == "Enough searching: it breaks lines."
    assert len(message.tool_calls) == 2
    assert [b.get("tool_choice") for b in fake.streamed] == [None, None, "none"]


@pytest.mark.django_db
def test_a_server_that_ignores_tool_choice_still_ends(fake, conversation, settings):
    settings.CHAT_MAX_TOOL_CALLS = 2
    fake.respond = lambda body: ToolCall("document_search", {"query": "again"})
    message, _ = ask(conversation)
    assert message.status == Message.Status.ERROR
    assert "gave no answer" in message.error
    assert len(fake.streamed) == 3


@pytest.mark.django_db
def test_text_before_a_tool_call_is_kept_apart_from_the_answer(fake, conversation):
    fake.script = [Answer("Let me look.", then_call=ToolCall("document_search", {"query": "url"}))]
    message, _ = ask(conversation)
    assert message.status == Message.Status.COMPLETE
    said = fake.streamed[1]["messages"][-2]
    assert said["content"] == "Let me look."
    assert said["tool_calls"][0]["function"]["name"] == "document_search"
    assert message.content.startswith("Let me look.\n\nThe documents say: ")
    assert [c["n"] for c in message.citations] == [1]


# --- Failures the user reads


@pytest.mark.django_db
def test_a_429_is_retried_and_then_succeeds(fake, conversation):
    fake.script = [Status(429)]
    message, _ = ask(conversation)
    assert message.status == Message.Status.COMPLETE
    assert len(fake.streamed) == 3  # the 429, the retried tool turn, the answer
    assert message.citations


@pytest.mark.django_db
def test_a_429_that_persists_says_the_model_is_busy(fake, conversation):
    fake.script = [Status(429)] * 3
    message, events = ask(conversation)
    assert message.status == Message.Status.ERROR
    assert "is busy" in message.error
    assert "try again" in message.error.lower()
    assert events.of("error")[0]["message"] == message.error


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "expected"),
    [(401, "refused the API key"), (403, "refused the API key"), (404, "‘fake-model’")],
)
def test_refusals_are_explained(fake, conversation, status, expected):
    fake.script = [Status(status)]
    message, _ = ask(conversation)
    assert message.status == Message.Status.ERROR
    assert expected in message.error
    assert f"HTTP {status}" in message.error
    assert "test-key" not in message.error


@pytest.mark.django_db
@pytest.mark.parametrize("clean", [False, True])
def test_a_stream_broken_midway_keeps_the_partial_answer(fake, conversation, clean):
    text = "The package defines a command that allows line breaks."
    fake.script = [
        ToolCall("document_search", {"query": "url"}),
        BreakMidStream(text, after_chunks=3, chunk_size=8, clean=clean),
    ]
    message, events = ask(conversation)
    assert message.status == Message.Status.ERROR
    assert "cut off" in message.error
    assert message.content == text[:24]
    assert "".join(d["text"] for d in events.of("token")) == text[:24]
    assert message.tool_calls[0]["name"] == "document_search"


@pytest.mark.django_db
def test_an_unreachable_server_is_named(conversation, settings):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.CHAT_MODEL = "fake-model"
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{port}/v1"
    message, _ = ask(conversation)
    assert message.status == Message.Status.ERROR
    assert f"The language model at 127.0.0.1:{port} did not answer" in message.error


@pytest.mark.django_db
def test_a_server_that_hangs_times_out(fake, conversation, settings):
    settings.CHAT_TIMEOUT = 0.3
    fake.script = [Hang(10)] * 3
    message, _ = ask(conversation)
    assert message.status == Message.Status.ERROR
    assert "did not answer within" in message.error


# --- The context budget


@pytest.mark.django_db
def test_the_budget_drops_the_oldest_history_first(fake, conversation, settings):
    huge = "Verbose " * 2500
    fake.script = [ToolCall("document_search", {"query": "url"}), Answer(huge, 400)]
    first, _ = ask(conversation)
    assert first.content == huge
    settings.CHAT_CONTEXT_TOKENS = 2048
    settings.CHAT_MAX_ANSWER_TOKENS = 256
    fake.requests.clear()
    message, _ = ask(conversation, "Short question?")
    assert message.status == Message.Status.COMPLETE
    for body in fake.streamed:
        assert body["max_tokens"] == 256
        assert "Verbose Verbose" not in json.dumps(body)
        assert prompt_tokens(body) <= 2048 - 256
    assert [m["role"] for m in fake.streamed[0]["messages"]] == ["system", "user"]


@pytest.mark.django_db
def test_the_budget_cuts_the_longest_tool_results(fake, conversation, settings):
    settings.CHAT_CONTEXT_TOKENS = 1536
    settings.CHAT_MAX_ANSWER_TOKENS = 256
    fake.script = [ToolCall("document_search", {"query": "url command package", "limit": 10})]
    message, _ = ask(conversation)
    assert message.status == Message.Status.COMPLETE
    second = fake.streamed[1]
    [result] = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    assert result.startswith('<source id="1"')
    assert result.endswith("[… cut to fit the model's context]")
    assert prompt_tokens(second) <= 1536 - 256
    assert message.citations  # what survived the cut is still quoted and verified


# --- Units


def test_openai_models_are_counted_with_tiktoken_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # nothing cached, nothing fetched
    assert token_counter("gpt-4o-mini")("hello world") == 2
    assert token_counter("openai/o3-mini")("hello world") == 2
    text = "The url package: \\urldef{\\xyz}"
    assert token_counter("llama3.1:8b")(text) == estimate_tokens(text)
    assert token_counter("gpt-4o")(text) != estimate_tokens(text)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"confidence": "high"}', {"confidence": "high"}),
        ('Sure!\n```json\n{"a": [1, 2]}\n```\nDone.', {"a": [1, 2]}),
        ("no json here", None),
        ('{"broken": ', None),
        ("[1, 2]", None),
    ],
)
def test_metadata_json_is_parsed_defensively(content, expected):
    assert parse_json_object(content) == expected


def test_fake_chat_default_quotes_the_first_sentence():
    state = FakeChat()
    body = {"stream": True, "messages": [
        {"role": "user", "content": "q"},
        {"role": "tool", "content": '<source id="1" file="a.pdf" page="2">\nOne two.  Three.\n'
                                    "</source>"},
    ]}  # fmt: skip
    assert state.default_turn(body) == Answer("The documents say: One two. [1]")
