"""The chat API: conversations, messages, asking with JSON or Server-Sent Events, retries, and
another user's ids. Answers come from the offline extractive answerer over a real PDF,
generated in the runner's background thread, so these tests commit (transaction=True)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.test import Client

from accounts.services import api_token_create
from chat import services
from chat.models import Conversation, Message
from notes.services import note_create
from tests.factories import NotebookFactory
from tests.fake_chat import Answer, Status, fake_chat_server
from tests.fixtures.documents import ingest, upload
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
# text.pdf (tests/samples/) answers it on page 1, quoting ANSWERED.
QUESTION = "Where does the grey heron wait motionless until dusk?"
ANSWERED = "The grey heron waits motionless by the millpond until dusk"
MESSAGE_FIELDS = {
    "id", "conversation_id", "role", "content", "status", "error", "reply_to_id", "answerer",
    "citations", "retrieved", "tool_calls", "confidence", "follow_ups", "usage", "timings",
    "metadata", "mode", "search_query", "is_follow_up", "anchors", "explicit_selections",
    "excluded_sources", "created_at", "updated_at",
}  # fmt: skip


@pytest.fixture
def library(alice):
    """A notebook whose note has text (enough for a notebook chat) but no PDF yet."""
    notebook = NotebookFactory.create(owner=alice, title="Field notes")
    note = note_create(
        notebook=notebook, author=alice, title="Millpond wildlife", body="Reading list: herons."
    )
    return {"notebook": notebook, "note": note}


@pytest.fixture
def conversation(alice, library) -> Conversation:
    """A chat about the note's PDF, the sample text.pdf, ingested for real."""
    attachment = ingest(upload(alice, library["note"], "text.pdf"))
    assert attachment.status == "ready"
    return services.conversation_create(
        owner=alice, notebook=library["notebook"], note=library["note"]
    )


@pytest.fixture
def notebook_chat(alice, library) -> Conversation:
    """A chat about the whole notebook, which can be asked (the note has text) without PDFs."""
    return services.conversation_create(owner=alice, notebook=library["notebook"])


@pytest.fixture
def bob_api(bob) -> Client:
    _, raw = api_token_create(user=bob, name="bob's script")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def post_json(client: Client, url: str, body: dict[str, Any], **extra: Any) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json", **extra)


def frames(buffer: bytes) -> tuple[list[tuple[str, dict[str, Any]]], bytes]:
    """The complete events at the start of `buffer`, and what is left of it."""
    events = []
    while b"\n\n" in buffer:
        frame, buffer = buffer.split(b"\n\n", 1)
        fields = dict(line.split(": ", 1) for line in frame.decode().splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events, buffer


def sse(chunks: Iterator[bytes]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Server-Sent Events, parsed as they arrive."""
    buffer = b""
    for chunk in chunks:
        events, buffer = frames(buffer + chunk)
        yield from events


def status_of(message_id: int) -> str:
    return Message.objects.get(pk=message_id).status


def wait_until_finished(message_id: int, seconds: float = 60) -> Message:
    def finished() -> Message | None:
        message = Message.objects.get(pk=message_id)
        done = message.status in (Message.Status.COMPLETE, Message.Status.ERROR)
        return message if done else None

    return wait_until(
        finished, seconds, interval=0.05,
        message=lambda: f"message {message_id} is still {status_of(message_id)}",
    )  # fmt: skip


# --- conversations ----------------------------------------------------------------------------


def test_conversation_crud_with_a_token(alice_api, alice, library):
    notebook, note = library["notebook"], library["note"]
    created = post_json(alice_api, "/api/conversations", {"notebook_id": notebook.pk})
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["title"] == "About Field notes"
    assert (body["notebook_id"], body["note_id"], body["message_count"]) == (notebook.pk, None, 0)
    conversation_id = body["id"]
    assert Conversation.objects.get(pk=conversation_id).owner == alice

    about_note = post_json(
        alice_api, "/api/conversations", {"notebook_id": notebook.pk, "note_id": note.pk}
    ).json()
    assert (about_note["note_id"], about_note["title"]) == (note.pk, "About Millpond wildlife")

    retrieved = alice_api.get(f"/api/conversations/{conversation_id}")
    assert retrieved.json()["message_count"] == 0
    patched = alice_api.patch(
        f"/api/conversations/{conversation_id}", {"title": "Colons"}, "application/json"
    )
    assert patched.json()["title"] == "Colons"
    assert alice_api.get(f"/api/conversations/{conversation_id}").json()["title"] == "Colons"
    empty = alice_api.patch(
        f"/api/conversations/{conversation_id}", {"title": "  "}, "application/json"
    )
    assert (empty.status_code, empty.json()["detail"]) == (422, "Give it a title.")

    assert alice_api.delete(f"/api/conversations/{conversation_id}").status_code == 204
    assert alice_api.get(f"/api/conversations/{conversation_id}").status_code == 404
    assert list(Conversation.objects.values_list("pk", flat=True)) == [about_note["id"]]


def test_conversation_lists_are_paginated_and_filtered(alice_api, alice, library):
    notebook, note = library["notebook"], library["note"]
    other = NotebookFactory.create(owner=alice, title="Other")
    whole = services.conversation_create(owner=alice, notebook=notebook, title="whole")
    scoped = services.conversation_create(owner=alice, notebook=notebook, note=note, title="note")
    elsewhere = services.conversation_create(owner=alice, notebook=other, title="elsewhere")
    services.message_ask(conversation=whole, content=QUESTION)  # touches it: newest first

    page = alice_api.get("/api/conversations?limit=2").json()
    assert page["count"] == 3
    assert [c["title"] for c in page["items"]] == ["whole", "elsewhere"]
    assert page["items"][0]["message_count"] == 2
    rest = alice_api.get("/api/conversations?limit=2&offset=2").json()
    assert [c["id"] for c in rest["items"]] == [scoped.pk]

    in_notebook = alice_api.get(f"/api/conversations?notebook_id={notebook.pk}").json()
    assert {c["id"] for c in in_notebook["items"]} == {whole.pk, scoped.pk}
    on_note = alice_api.get(f"/api/conversations?note_id={note.pk}").json()
    assert [c["id"] for c in on_note["items"]] == [scoped.pk]
    assert elsewhere.pk not in {c["id"] for c in in_notebook["items"]}


def test_a_note_from_another_notebook_is_refused(alice_api, alice, library):
    other = NotebookFactory.create(owner=alice)
    response = post_json(
        alice_api,
        "/api/conversations",
        {"notebook_id": other.pk, "note_id": library["note"].pk},
    )
    assert response.status_code == 422
    assert response.json()["detail"] == "That note is not in this notebook."
    assert not Conversation.objects.exists()


# --- asking -----------------------------------------------------------------------------------


def test_asking_streams_server_sent_events(alice_api, conversation):
    # (`Accept: text/event-stream` asks for the same: see the ASGI test below.)
    response = post_json(
        alice_api,
        f"/api/conversations/{conversation.pk}/messages",
        {"content": f"  {QUESTION} ", "stream": True},
    )
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["Cache-Control"] == "no-cache"
    assert response["X-Accel-Buffering"] == "no"
    events = list(sse(response.streaming_content))

    kind, opening = events[0]
    assert kind == "message"
    question = Message.objects.get(pk=opening["question_id"])
    assert (question.role, question.content) == ("user", QUESTION)
    answer_id = opening["message_id"]
    assert opening["conversation_id"] == conversation.pk
    kinds = [kind for kind, _ in events]
    assert kinds[1:3] == ["searched", "tool"]
    first_citation, done = kinds.index("citation"), kinds.index("done")
    assert kinds.count("token") >= 2  # a sentence at a time
    assert max(i for i, k in enumerate(kinds) if k == "token") < first_citation < done
    assert done == len(kinds) - 1
    assert all(data["message_id"] == answer_id for _, data in events)

    final = events[-1][1]
    assert {"usage", "confidence", "follow_ups", "citations", "timings"} <= set(final)
    saved = Message.objects.get(pk=answer_id)
    assert saved.status == "complete"
    assert saved.reply_to_id == question.pk
    assert saved.content == "".join(data["text"] for kind, data in events if kind == "token")
    streamed_citations = [
        {k: v for k, v in data.items() if k != "message_id"}
        for kind, data in events
        if kind == "citation"
    ]
    assert saved.citations == streamed_citations == final["citations"]
    assert {c["file"] for c in saved.citations} == {"text.pdf"}
    assert saved.usage == final["usage"]


def test_asking_without_streaming_returns_the_finished_answer(alice_api, conversation):
    response = post_json(
        alice_api, f"/api/conversations/{conversation.pk}/messages", {"content": QUESTION}
    )
    assert response.status_code == 201, response.content
    answer = response.json()
    assert set(answer) == MESSAGE_FIELDS
    assert (answer["role"], answer["status"], answer["answerer"]) == (
        "assistant",
        "complete",
        "extractive",
    )
    assert ANSWERED in answer["content"]
    assert answer["citations"]
    assert answer["retrieved"]
    assert answer["tool_calls"]
    assert {"retrieval", "first_token", "total"} <= set(answer["timings"])
    assert answer["metadata"]["unverified_citations"] == 0

    listed = alice_api.get(f"/api/conversations/{conversation.pk}/messages").json()
    assert listed["count"] == 2
    question, saved = listed["items"]
    assert (question["role"], question["content"], question["id"]) == (
        "user",
        QUESTION,
        answer["reply_to_id"],
    )
    assert saved == answer
    assert set(question) == MESSAGE_FIELDS
    conversation.refresh_from_db()
    assert conversation.title == QUESTION[:80]


@pytest.mark.parametrize(
    ("content", "detail"),
    [("   ", "Type a question first."), ("x" * 4001, "Keep the question under 4,000")],
    ids=["empty", "huge"],
)
def test_empty_and_huge_questions_are_refused(alice_api, notebook_chat, content, detail):
    response = post_json(
        alice_api,
        f"/api/conversations/{notebook_chat.pk}/messages",
        {"content": content, "stream": True},
    )
    assert response.status_code == 422
    assert response.json()["detail"].startswith(detail)
    assert not Message.objects.exists()


def test_a_chat_with_nothing_to_search_is_refused(alice_api, alice):
    notebook = NotebookFactory.create(owner=alice)
    note = note_create(notebook=notebook, author=alice, title="Empty")
    upload(alice, note, "text.pdf")  # not ingested: not ready
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    response = post_json(
        alice_api, f"/api/conversations/{conversation.pk}/messages", {"content": QUESTION}
    )
    assert response.status_code == 422
    assert "nothing to search" in response.json()["detail"]
    assert not Message.objects.exists()


@pytest.fixture
def chat_model(settings):
    """The chat model path, against a local server speaking OpenAI's protocol."""
    with fake_chat_server() as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        yield server


def test_the_chat_model_streams_its_tokens_and_usage(alice_api, conversation, chat_model):
    response = post_json(
        alice_api,
        f"/api/conversations/{conversation.pk}/messages",
        {"content": QUESTION, "stream": True},
    )
    events = list(sse(response.streaming_content))
    kinds = [kind for kind, _ in events]
    assert kinds[:3] == ["message", "searched", "tool"]
    assert (kinds[-2], kinds[-1]) == ("citation", "done")
    usage = events[-1][1]["usage"]
    assert usage["completion_tokens"] > 0
    saved = Message.objects.get(pk=events[0][1]["message_id"])
    assert (saved.status, saved.answerer, saved.usage) == ("complete", "llm", usage)
    assert saved.content == "".join(data["text"] for kind, data in events if kind == "token")
    assert saved.citations == events[-1][1]["citations"]


def test_a_failed_answer_ends_the_stream_with_an_error_and_can_be_read(
    alice_api, conversation, chat_model
):
    chat_model.script = [Status(401, "Incorrect API key provided.")]
    response = post_json(
        alice_api,
        f"/api/conversations/{conversation.pk}/messages",
        {"content": QUESTION, "stream": True},
    )
    events = list(sse(response.streaming_content))
    kind, data = events[-1]
    assert kind == "error"
    assert data["message"]
    answer_id = events[0][1]["message_id"]
    assert data["message_id"] == answer_id

    chat_model.script = [Status(401, "Incorrect API key provided.")]
    as_json = post_json(
        alice_api, f"/api/conversations/{conversation.pk}/messages", {"content": QUESTION}
    )
    assert as_json.status_code == 201
    assert (as_json.json()["status"], as_json.json()["error"]) == ("error", data["message"])
    listed = alice_api.get(f"/api/conversations/{conversation.pk}/messages").json()["items"]
    assert [m["status"] for m in listed] == ["complete", "error", "complete", "error"]

    retried = alice_api.post(f"/api/messages/{answer_id}/retry")
    assert retried.json()["status"] == "complete"


@pytest.fixture
def paused_model(settings):
    """A chat model (local fake server, real protocol) that stops after three chunks of its
    answer until the test sets `gate`: the reader can leave while the answer is unfinished."""
    with fake_chat_server() as server:

        def respond(body: dict[str, Any]) -> Any:
            turn = server.default_turn(body)
            if isinstance(turn, Answer):
                turn.pause_after = 3
            return turn

        server.respond = respond
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        yield server
        server.gate.set()


def test_an_abandoned_stream_still_saves_the_whole_answer(alice_api, conversation, paused_model):
    response = post_json(
        alice_api,
        f"/api/conversations/{conversation.pk}/messages",
        {"content": QUESTION, "stream": True},
    )
    events = sse(response.streaming_content)
    answer_id = next(events)[1]["message_id"]
    seen = []
    for kind, data in events:
        if kind == "token":
            seen.append(data["text"])
        if len(seen) == 3:
            break
    response.close()
    assert Message.objects.get(pk=answer_id).status == "streaming"
    paused_model.gate.set()

    saved = wait_until_finished(answer_id)
    assert saved.status == "complete"
    assert saved.content.startswith("".join(seen))
    assert len(saved.content) > len("".join(seen))
    assert saved.citations
    assert saved.answerer == "llm"


def test_the_asgi_server_streams_and_a_disconnect_leaves_the_answer_saved(
    alice_token, conversation, paused_model
):
    """Django's own ASGI handler, as daphne runs it: the first tokens go out while the answer
    is being written (a sync iterator would be buffered whole), and when the client hangs up
    the answer is finished and saved all the same."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"/api/conversations/{conversation.pk}/messages",
        "raw_path": f"/api/conversations/{conversation.pk}/messages".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"authorization", f"Bearer {alice_token}".encode()),
            (b"accept", b"text/event-stream"),
            (b"content-type", b"application/json"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }

    async def converse() -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]], str]:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        await inbox.put(
            {"type": "http.request", "body": json.dumps({"content": QUESTION}).encode()}
        )

        async def send(message: Mapping[str, Any]) -> None:
            await outbox.put(dict(message))

        server = asyncio.create_task(ASGIHandler()(scope, inbox.get, send))
        start = await asyncio.wait_for(outbox.get(), 30)
        events: list[tuple[str, dict[str, Any]]] = []
        buffer = b""
        while [kind for kind, _ in events].count("token") < 3:
            message = await asyncio.wait_for(outbox.get(), 30)
            more, buffer = frames(buffer + message["body"])
            events.extend(more)
        status = await sync_to_async(status_of)(events[0][1]["message_id"])
        await inbox.put({"type": "http.disconnect"})
        await asyncio.wait_for(server, 30)
        paused_model.gate.set()
        return start, events, status

    start, events, status_at_disconnect = async_to_sync(converse)()
    assert start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"Content-Type"].startswith(b"text/event-stream")
    assert headers[b"X-Accel-Buffering"] == b"no"
    assert status_at_disconnect == "streaming"
    seen = "".join(data["text"] for kind, data in events if kind == "token")

    saved = wait_until_finished(events[0][1]["message_id"])
    assert saved.status == "complete"
    assert saved.content.startswith(seen)
    assert len(saved.content) > len(seen)
    assert saved.citations


def test_a_failed_answer_can_be_retried_once(alice_api, conversation):
    _, answer = services.message_ask(conversation=conversation, content=QUESTION)
    Message.objects.filter(pk=answer.pk).update(status="error", error="The model was down.")

    retried = alice_api.post(f"/api/messages/{answer.pk}/retry")
    assert retried.status_code == 200, retried.content
    body = retried.json()
    assert (body["id"], body["status"], body["error"]) == (answer.pk, "complete", "")
    assert ANSWERED in body["content"]

    again = alice_api.post(f"/api/messages/{answer.pk}/retry")
    assert again.status_code == 409
    question = answer.reply_to
    assert question is not None
    assert alice_api.post(f"/api/messages/{question.pk}/retry").status_code == 409
    assert Message.objects.count() == 2


def test_an_interrupted_answer_can_be_retried_as_a_stream(alice_api, conversation):
    _, answer = services.message_ask(conversation=conversation, content=QUESTION)
    Message.objects.filter(pk=answer.pk).update(status="interrupted", content="half")
    response = alice_api.post(f"/api/messages/{answer.pk}/retry?stream=true")
    events = list(sse(response.streaming_content))
    assert events[0] == (
        "message",
        {
            "conversation_id": conversation.pk,
            "question_id": answer.reply_to_id,
            "message_id": answer.pk,
        },
    )
    assert events[-1][0] == "done"
    saved = Message.objects.get(pk=answer.pk)
    assert saved.status == "complete"
    assert saved.content == "".join(data["text"] for kind, data in events if kind == "token")


# --- another user -----------------------------------------------------------------------------


def test_bob_gets_404_for_alices_chats_on_every_route(bob_api, library, notebook_chat):
    conversation = notebook_chat
    question, answer = services.message_ask(conversation=conversation, content=QUESTION)
    Message.objects.filter(pk=answer.pk).update(status="error", error="down")
    notebook, note = library["notebook"], library["note"]
    c, m = conversation.pk, answer.pk
    routes = [
        ("GET", f"/api/conversations/{c}", None),
        ("PATCH", f"/api/conversations/{c}", {"title": "pwned"}),
        ("DELETE", f"/api/conversations/{c}", None),
        ("GET", f"/api/conversations/{c}/messages", None),
        ("POST", f"/api/conversations/{c}/messages", {"content": "pwned"}),
        ("POST", f"/api/conversations/{c}/messages", {"content": "pwned", "stream": True}),
        ("POST", f"/api/messages/{m}/retry", None),
        ("POST", f"/api/messages/{question.pk}/retry?stream=true", None),
        ("POST", "/api/conversations", {"notebook_id": notebook.pk}),
        ("POST", "/api/conversations", {"notebook_id": notebook.pk, "note_id": note.pk}),
        ("GET", f"/api/conversations?notebook_id={notebook.pk}", None),
        ("GET", f"/api/conversations?note_id={note.pk}", None),
    ]
    for method, url, body in routes:
        response = bob_api.generic(
            method, url, json.dumps(body) if body else "", content_type="application/json"
        )
        assert response.status_code == 404, f"{method} {url} answered {response.status_code}"

    assert bob_api.get("/api/conversations").json()["count"] == 0
    conversation.refresh_from_db()
    assert conversation.title == QUESTION[:80]
    assert Conversation.objects.count() == 1
    assert Message.objects.count() == 2
    assert Message.objects.get(pk=m).status == "error"  # not retried


def test_anonymous_requests_get_401(notebook_chat):
    conversation = notebook_chat
    client = Client()
    assert client.get("/api/conversations").status_code == 401
    assert client.get(f"/api/conversations/{conversation.pk}/messages").status_code == 401
    response = post_json(
        client, f"/api/conversations/{conversation.pk}/messages", {"content": QUESTION}
    )
    assert response.status_code == 401
    assert not Message.objects.exists()


def test_a_question_takes_chosen_sources_and_returns_them(alice_api, conversation, library, bob):
    """Selections go in as the composer's chips and come back resolved on the question; a
    malformed or foreign one is refused (422) with nothing saved. Ask this PDF by id."""
    attachment = conversation.note.attachments.get()
    chip = {"kind": "file", "mode": "all", "ref": f"attachment:{attachment.pk}", "name": "?"}
    url = f"/api/conversations/{conversation.pk}/messages"
    response = post_json(alice_api, url, {"content": QUESTION, "selections": [chip]})
    assert response.status_code == 201, response.content
    assert response.json()["metadata"]["source_summary"]["explicit_selected_count"] == 1
    question = alice_api.get(url).json()["items"][0]
    assert question["explicit_selections"] == [
        {"kind": "file", "mode": "all", "ref": f"attachment:{attachment.pk}", "name": "text.pdf",
         "path": "Field notes / Millpond wildlife / text.pdf",
         "source_ids": [f"attachment:{attachment.pk}"], "subfile_count": 1},
    ]  # fmt: skip
    assert question["excluded_sources"] == []

    theirs = NotebookFactory.create(owner=bob, title="Bob's")
    chip = {"kind": "path", "ref": f"notebook:{theirs.pk}"}
    foreign = post_json(alice_api, url, {"content": QUESTION, "selections": [chip]})
    assert foreign.status_code == 404, foreign.content  # like any id naming another's object
    assert b"Bob" not in foreign.content
    for body in (
        {"content": QUESTION, "selections": [{"kind": "file", "ref": "bogus"}]},
        {"content": QUESTION, "excluded": ["bogus:1"]},
    ):
        refused = post_json(alice_api, url, body)
        assert refused.status_code == 422, refused.content
    assert alice_api.get(url).json()["count"] == 2

    about_file = {"notebook_id": library["notebook"].pk, "attachment_id": attachment.pk}
    created = post_json(alice_api, "/api/conversations", about_file)
    assert created.status_code == 201, created.content
    assert created.json()["attachment_id"] == attachment.pk
    assert created.json()["title"] == "text.pdf"
