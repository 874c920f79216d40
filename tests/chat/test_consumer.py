"""The conversation socket, through the real ASGI application (origin check, session auth,
URL routing) with Channels' WebsocketCommunicator. Answers come from the offline extractive
answerer over a real PDF in the runner's background thread, so these tests commit."""

from __future__ import annotations

import html
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.conf import settings

from chat import agent, runner, services
from chat.extractive import ExtractiveAnswerer
from chat.models import Conversation, Message
from notes.services import note_create
from tests.factories import NotebookFactory
from tests.fixtures.sockets import (
    QUESTION,
    TIMEOUT,
    answer_id_in,
    ask_frame,
    cookies_of,
    final,
    frames_until,
    run,
    socket,
    tokens_in,
)
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def conversation(alice, library) -> Conversation:
    return services.conversation_create(
        owner=alice, notebook=library["notebook"], note=library["note"]
    )


@pytest.fixture
def bare(alice) -> Conversation:
    """A conversation about a note without PDFs (nothing to answer from): for the tests that
    never get as far as an answer."""
    notebook = NotebookFactory.create(owner=alice, title="Empty")
    note = note_create(notebook=notebook, author=alice, title="Nothing yet")
    return services.conversation_create(owner=alice, notebook=notebook, note=note)


def wait_until_finished(message_id: int, seconds: float = 60) -> Message:
    def finished() -> Message | None:
        message = Message.objects.get(pk=message_id)
        done = message.status in (Message.Status.COMPLETE, Message.Status.ERROR)
        return message if done else None

    return wait_until(
        finished, seconds, interval=0.05,
        message=lambda: f"message {message_id}: {Message.objects.get(pk=message_id).status}",
    )  # fmt: skip


class Gated:
    """The real extractive answerer, paused mid-answer until the test says go. Before pausing
    it waits long enough for the agent to save the text so far (a reload shows it)."""

    name = "extractive"

    def __init__(self, after_tokens: int) -> None:
        self.inner = ExtractiveAnswerer()
        self.after_tokens = after_tokens
        self.paused = threading.Event()
        self.go = threading.Event()

    def run(self, question: str, history: list[tuple[str, str]], context: Any) -> Iterator[Any]:
        tokens = 0
        for event in self.inner.run(question, history, context):
            if type(event).__name__ == "Token":
                tokens += 1
                if tokens == self.after_tokens:
                    time.sleep(
                        agent.SAVE_EVERY + 0.1
                    )  # the fake's pace: this token's arrival saves
                if tokens == self.after_tokens + 1:
                    self.paused.set()
                    assert self.go.wait(60)
            yield event


# --- who may connect --------------------------------------------------------------------------


def test_an_anonymous_socket_is_closed(bare):
    async def go() -> bool:
        communicator = socket(bare.pk)
        connected, _ = await communicator.connect()
        await communicator.disconnect()
        return bool(connected)

    assert run(go) is False


@pytest.mark.parametrize("origin", [b"https://evil.example", b"null"])
def test_a_socket_from_a_foreign_origin_is_refused(alice, bare, origin):
    cookie = cookies_of(alice)

    async def go() -> bool:
        communicator = socket(bare.pk, cookie, origin=origin)
        connected, _ = await communicator.connect()
        await communicator.disconnect()
        return bool(connected)

    assert run(go) is False


def test_alice_connects_to_her_conversation(alice, bare):
    cookie = cookies_of(alice)

    async def go() -> bool:
        communicator = socket(bare.pk, cookie)
        connected, _ = await communicator.connect()
        await communicator.disconnect()
        return bool(connected)

    assert run(go) is True


def test_bob_cannot_open_alices_conversation(bob, bare):
    cookie = cookies_of(bob)

    async def go() -> list[bool]:
        results = []
        for conversation_id in (bare.pk, 999_999):
            communicator = socket(conversation_id, cookie)
            connected, _ = await communicator.connect()
            await communicator.disconnect()
            results.append(bool(connected))
        return results

    assert run(go) == [False, False]


def test_ids_no_conversation_can_have_are_refused(alice):
    cookie = cookies_of(alice)

    async def go() -> list[bool]:
        results = []
        for conversation_id in (0, 2**63 - 1, 2**63, 2**64, int("9" * 100)):
            communicator = socket(conversation_id, cookie)
            connected, _ = await communicator.connect()
            await communicator.disconnect()
            results.append(bool(connected))
        return results

    assert run(go) == [False] * 5


def test_bob_cannot_post_to_or_retry_in_alices_conversation(alice, bob, bare):
    """Bob, on his own conversation's socket, names Alice's failed answer: nothing happens."""
    question = Message.objects.create(conversation=bare, role="user", content=QUESTION)
    alices_answer = Message.objects.create(
        conversation=bare, role="assistant", reply_to=question, status="error", error="down"
    )
    bobs_book = NotebookFactory.create(owner=bob)
    bobs = services.conversation_create(owner=bob, notebook=bobs_book)
    cookie = cookies_of(bob)

    async def go() -> None:
        communicator = socket(bobs.pk, cookie)
        assert (await communicator.connect())[0]
        await communicator.send_to(
            text_data=json.dumps({"action": "retry", "message_id": alices_answer.pk})
        )
        assert await communicator.receive_nothing(timeout=0.5)
        await communicator.disconnect()

    run(go)
    alices_answer.refresh_from_db()
    assert (alices_answer.status, alices_answer.error) == ("error", "down")
    assert Message.objects.count() == 2


def test_a_conversation_that_goes_away_closes_its_socket(alice, bare):
    """Ownership is checked again on every message, not only on connect."""
    cookie = cookies_of(alice)
    delete = database_sync_to_async(services.conversation_delete)

    async def go() -> dict[str, Any]:
        communicator = socket(bare.pk, cookie)
        assert (await communicator.connect())[0]
        await delete(conversation=bare)
        await communicator.send_to(text_data=ask_frame(QUESTION))
        output = await communicator.receive_output(timeout=TIMEOUT)
        await communicator.wait()
        return dict(output)

    assert run(go) == {"type": "websocket.close", "code": 4404}
    assert not Message.objects.exists()


# --- asking -----------------------------------------------------------------------------------


def test_a_question_streams_tokens_then_the_rendered_answer(alice, conversation):
    cookie = cookies_of(alice)

    async def go() -> list[str]:
        communicator = socket(conversation.pk, cookie)
        assert (await communicator.connect())[0]
        await communicator.send_to(text_data=ask_frame(QUESTION))
        form = await communicator.receive_from(timeout=TIMEOUT)
        shown = await communicator.receive_from(timeout=TIMEOUT)
        answer_id = answer_id_in(shown)
        rest = await frames_until(communicator, final(answer_id))
        await communicator.disconnect()
        return [form, shown, *rest]

    form, shown, *rest = run(go)
    question, answer = Message.objects.order_by("pk")
    # The ask form comes back empty; the question and a placeholder are appended at once.
    assert form.startswith('<form id="ask-form"')
    assert 'hx-swap-oob="true"' in form
    assert "</textarea>" in form
    assert QUESTION not in form
    assert shown.startswith('<div id="message-list" hx-swap-oob="beforeend">')
    assert QUESTION in shown
    assert f'<h1 id="conversation-title" hx-swap-oob="innerHTML">{QUESTION[:80]}</h1>' in shown
    assert f'id="message-{answer.pk}-text"' in shown
    assert "Thinking…" in shown
    # Tool activity, then tokens, then the whole message from the database.
    status = next(f for f in rest if 'data-testid="tool-status"' in f)
    assert "Searching documents for ‘" in status
    assert rest.index(status) < next(i for i, f in enumerate(rest) if "beforeend" in f)
    assert answer.status == "complete"
    assert tokens_in(rest, answer.pk) == answer.content
    last = rest[-1]
    assert last.startswith(f'<article id="message-{answer.pk}"')
    assert 'hx-swap-oob="true"' in last
    assert "status-complete" in last
    assert "every link points to a page that exists" in last  # manual.pdf's answer
    assert 'data-testid="citation-chip"' in last
    assert "Extractive answer" in last
    assert 'name="csrfmiddlewaretoken" value="' in last  # its forms also work as plain posts
    assert question.content == QUESTION


@pytest.mark.parametrize(
    "content",
    ["", "   ", "x" * (settings.CHAT_QUESTION_MAX_CHARS + 1), "Anything to read?"],
    ids=["empty", "blank", "long", "nothing-to-search"],
)
def test_a_refused_question_gets_the_form_back_with_an_error_and_nothing_is_saved(
    alice, bare, content
):
    cookie = cookies_of(alice)

    async def go() -> tuple[str, bool]:
        communicator = socket(bare.pk, cookie)
        assert (await communicator.connect())[0]
        await communicator.send_to(text_data=ask_frame(content))
        frame = await communicator.receive_from(timeout=TIMEOUT)
        quiet = await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        return frame, quiet

    frame, quiet = run(go)
    assert frame.startswith('<form id="ask-form"')
    assert 'hx-swap-oob="true"' in frame
    assert 'data-testid="ask-error"' in frame
    assert ("Type a question first." in frame) == (not content.strip())
    assert ("There is nothing to search here yet" in frame) == (content == "Anything to read?")
    if content.strip():
        assert f">\n{content}</textarea>" in frame  # what was typed is kept
    assert quiet
    assert not Message.objects.exists()


def test_a_question_with_a_control_character_gets_the_form_back_with_an_error(alice, bare):
    cookie = cookies_of(alice)

    async def go() -> tuple[str, bool]:
        communicator = socket(bare.pk, cookie)
        assert (await communicator.connect())[0]
        await communicator.send_to(text_data=ask_frame("Why\x00 not?"))
        frame = await communicator.receive_from(timeout=TIMEOUT)
        quiet = await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        return frame, quiet

    frame, quiet = run(go)
    assert frame.startswith('<form id="ask-form"')
    assert 'data-testid="ask-error"' in frame
    assert "contains a control character" in frame
    assert quiet
    assert not Message.objects.exists()


def test_nonsense_frames_are_ignored(alice, bare):
    cookie = cookies_of(alice)
    hostile_ids = ["x", "²", "١٢", "-1", "0", str(2**63), str(2**64), "9" * 5000]
    retries = [json.dumps({"action": "retry", "message_id": i}) for i in hostile_ids]
    retries.append(f'{{"action": "continue", "message_id": {2**64}}}')

    async def go() -> bool:
        communicator = socket(bare.pk, cookie)
        assert (await communicator.connect())[0]
        for text in ("not json", "[1, 2]", *retries):
            await communicator.send_to(text_data=text)
        quiet = bool(await communicator.receive_nothing(timeout=0.3))
        await communicator.disconnect()
        return quiet

    assert run(go)
    assert not Message.objects.exists()


def test_a_failed_answer_is_retried_over_the_socket(alice, conversation):
    _, answer = services.message_ask(conversation=conversation, content=QUESTION)
    Message.objects.filter(pk=answer.pk).update(status="error", error="The model was down.")
    cookie = cookies_of(alice)

    async def go() -> list[str]:
        communicator = socket(conversation.pk, cookie)
        assert (await communicator.connect())[0]
        await communicator.send_to(
            text_data=json.dumps({"action": "retry", "message_id": str(answer.pk)})
        )
        frames = await frames_until(communicator, final(answer.pk))
        await communicator.disconnect()
        return frames

    frames = run(go)
    assert frames[0].startswith(f'<article id="message-{answer.pk}"')
    assert "Thinking…" in frames[0]
    assert "status-complete" in frames[-1]
    answer.refresh_from_db()
    assert (answer.status, answer.error) == ("complete", "")
    assert Message.objects.count() == 2


# --- leaving and coming back ------------------------------------------------------------------


def test_leaving_mid_answer_still_saves_the_whole_answer(alice, conversation, monkeypatch):
    gated = Gated(after_tokens=3)
    monkeypatch.setattr(agent, "get_answerer", lambda: gated)
    cookie = cookies_of(alice)

    async def go() -> tuple[int, str]:
        communicator = socket(conversation.pk, cookie)
        assert (await communicator.connect())[0]
        await communicator.send_to(text_data=ask_frame(QUESTION))
        await communicator.receive_from(timeout=TIMEOUT)  # the form
        answer_id = answer_id_in(await communicator.receive_from(timeout=TIMEOUT))
        frames = await frames_until(communicator, lambda f: tokens_in([f], answer_id) != "")
        frames += [await communicator.receive_from(timeout=TIMEOUT) for _ in range(2)]
        await communicator.disconnect()
        return answer_id, tokens_in(frames, answer_id)

    answer_id, seen = run(go)
    assert gated.paused.wait(30)
    assert Message.objects.get(pk=answer_id).status == "streaming"
    gated.go.set()
    saved = wait_until_finished(answer_id)
    assert saved.status == "complete"
    assert saved.content.startswith(seen)
    assert len(saved.content) > len(seen)
    assert saved.citations
    assert "every link points to a page that exists" in saved.content


def test_a_reload_mid_answer_shows_the_text_so_far_and_keeps_streaming(
    alice, alice_client, conversation, monkeypatch
):
    gated = Gated(after_tokens=3)
    monkeypatch.setattr(agent, "get_answerer", lambda: gated)
    cookie = cookies_of(alice)
    _, answer = services.message_ask(conversation=conversation, content=QUESTION)

    runner.start(answer.pk, conversation.pk)  # as the socket that asked would have
    assert gated.paused.wait(30)

    # The reloaded page, rendered from the database: the text so far, still being written.
    page = alice_client.get(f"/chats/{conversation.pk}/").content.decode()
    so_far = Message.objects.get(pk=answer.pk).content
    assert so_far
    assert "Still being written…" in page
    assert (
        f'<div class="streaming-text" id="message-{answer.pk}-text">{html.escape(so_far)}' in page
    )
    assert f'hx-get="/chats/messages/{answer.pk}/"' in page

    # Its socket joins the conversation and receives the rest, without a second generation.
    async def go() -> list[str]:
        communicator = socket(conversation.pk, cookie)
        assert (await communicator.connect())[0]
        gated.go.set()
        frames = await frames_until(communicator, final(answer.pk))
        await communicator.disconnect()
        return frames

    frames = run(go)
    saved = wait_until_finished(answer.pk)
    assert saved.status == "complete"
    assert so_far + tokens_in(frames, answer.pk) == saved.content
    assert "status-complete" in frames[-1]
    assert Message.objects.count() == 2
