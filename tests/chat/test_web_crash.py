"""An answer whose web process dies mid-stream ends up interrupted, with Retry, never shown as
complete and never "still being written" forever.

Answers are generated in a thread of the web process (chat.runner). While one runs, a
heartbeat touches its row every chat.agent.HEARTBEAT_SECONDS; an answer in progress whose row
went untouched for chat.services.ABANDONED_AFTER_SECONDS lost its process and is marked
interrupted: by the worker's periodic task, and when its conversation or the message is read.
A generation that was given up for dead (or whose answer was retried meanwhile) stops instead
of overwriting. The last test SIGKILLs a real daphne process while a (fake, local) chat model
is streaming, restarts it, and follows the answer to "interrupted" and through Retry.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import requests
from daphne.testing import DaphneProcess
from django.db import connections
from django.test import Client
from django.utils import timezone

from accounts.services import api_token_create
from chat import agent, services, tasks
from chat.agent import generate
from chat.events import Finished, Token
from chat.models import Message
from tests.daphne_server import start_daphne
from tests.fake_chat import Answer, fake_chat_server
from tests.fixtures.live import QUESTION, Socket, final
from tests.fixtures.waiting import wait_until

INTERRUPTED = "This answer was interrupted before it was finished."
RETRY_BUTTON = '<button type="submit" class="primary">Retry</button>'


def answer_statuses(html: str) -> list[str]:
    return re.findall(r'class="message message-assistant status-(\w+)"', html)


def abandon(message: Message, seconds: float = 3600, **fields: Any) -> None:
    """As a web process that died mid-answer leaves it: in progress, untouched for a while."""
    Message.objects.filter(pk=message.pk).update(
        updated_at=timezone.now() - timedelta(seconds=seconds), **fields
    )


# --- the sweep --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_periodic_task_interrupts_abandoned_answers_only(conversation):
    _, streaming = services.message_ask(conversation=conversation, content=QUESTION)
    _, pending = services.message_ask(conversation=conversation, content="And semicolons?")
    _, alive = services.message_ask(conversation=conversation, content="And slashes?")
    abandon(streaming, status="streaming", content="Colons are")
    abandon(pending)
    Message.objects.filter(pk=alive.pk).update(status="streaming")  # touched just now
    old = Message.objects.filter(role="user").update(updated_at=timezone.now() - timedelta(hours=1))
    assert old == 3

    assert tasks.interrupt_abandoned_answers() == 2
    assert tasks.interrupt_abandoned_answers() == 0  # idempotent
    streaming.refresh_from_db()
    assert (streaming.status, streaming.content) == ("interrupted", "Colons are")
    assert streaming.error == services.INTERRUPTED_REASON
    assert Message.objects.get(pk=pending.pk).status == "interrupted"
    assert Message.objects.get(pk=alive.pk).status == "streaming"
    assert set(Message.objects.filter(role="user").values_list("status", flat=True)) == {"complete"}


@pytest.mark.django_db
def test_reading_the_conversation_shows_an_abandoned_answer_as_interrupted_with_retry(
    conversation, alice_client, alice_api
):
    """No worker needed: the page, the answer's poll and the API settle it when they read."""
    for client, url in (
        (alice_client, "/chats/{conversation}/"),
        (alice_client, "/chats/messages/{answer}/"),
        (alice_api, "/api/conversations/{conversation}/messages"),
    ):
        _, answer = services.message_ask(conversation=conversation, content=QUESTION)
        abandon(answer, status="streaming", content="Colons are")
        response = client.get(url.format(conversation=conversation.pk, answer=answer.pk))
        assert response.status_code == 200
        answer.refresh_from_db()
        assert answer.status == "interrupted"
    page = alice_client.get(f"/chats/{conversation.pk}/").content.decode()
    assert page.count(INTERRUPTED) == 3
    assert page.count(RETRY_BUTTON) == 3
    assert "Still being written" not in page
    assert answer_statuses(page) == ["interrupted"] * 3
    items = alice_api.get(f"/api/conversations/{conversation.pk}/messages").json()["items"]
    assert [m["status"] for m in items if m["role"] == "assistant"] == ["interrupted"] * 3
    assert {m["error"] for m in items if m["role"] == "assistant"} == {services.INTERRUPTED_REASON}


@pytest.mark.django_db
def test_a_fresh_answer_or_a_fresh_retry_is_not_taken_for_abandoned(conversation, alice_client):
    _, answer = services.message_ask(conversation=conversation, content=QUESTION)
    alice_client.get(f"/chats/{conversation.pk}/")
    assert Message.objects.get(pk=answer.pk).status == "pending"  # just asked
    abandon(answer, status="interrupted")
    retried = services.message_retry(message=Message.objects.get(pk=answer.pk))
    assert retried.status == "pending"
    alice_client.get(f"/chats/messages/{answer.pk}/")
    assert Message.objects.get(pk=answer.pk).status == "pending"  # retried just now


class TakenOver:
    """An answerer during whose work its answer is given up for dead and retried."""

    name = "llm"
    notice = ""

    def __init__(self, retry: bool) -> None:
        self.retry = retry

    def run(self, question: str, history: Any, context: Any) -> Iterator[Any]:
        yield Token("Colons ")
        message = Message.objects.get(role="assistant")
        abandon(message)
        assert services.message_interrupt_abandoned() == 1
        if self.retry:
            services.message_retry(message=Message.objects.get(pk=message.pk))
            assert agent.claim(message.pk) is not None  # another generation owns it now
        time.sleep(agent.SAVE_EVERY + 0.05)  # the fake model's pace: the next token saves
        yield Token("are fine.")  # this save finds the answer is no longer ours
        yield Finished(confidence="high")


@pytest.mark.django_db
@pytest.mark.parametrize("retry", [False, True], ids=["interrupted", "retried"])
def test_a_generation_given_up_for_dead_stops_without_overwriting(conversation, retry):
    _, answer = services.message_ask(conversation=conversation, content=QUESTION)
    events: list[tuple[str, dict[str, Any]]] = []
    generate(answer.pk, lambda e, d: events.append((e, d)), answerer=TakenOver(retry))
    answer.refresh_from_db()
    assert answer.status == ("streaming" if retry else "interrupted")
    assert answer.attempt == (2 if retry else 1)
    assert "are fine" not in answer.content
    assert events[-1] == ("error", {"message_id": answer.pk,
                                    "message": "This answer was interrupted."})  # fmt: skip
    assert "done" not in [event for event, _ in events]


class Slow:
    """A model that thinks for a long time before its first token."""

    name = "llm"
    notice = ""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def run(self, question: str, history: Any, context: Any) -> Iterator[Any]:
        time.sleep(self.seconds)  # the fake model's own pace (what the test is about), no wait
        yield Token("Colons break URLs.")
        yield Finished(confidence="high")


@pytest.mark.django_db(transaction=True)  # the heartbeat writes from its own thread
@pytest.mark.parametrize("beating", [True, False], ids=["heartbeat", "without-heartbeat"])
def test_the_heartbeat_keeps_a_slow_live_answer_from_being_taken_for_abandoned(
    conversation, monkeypatch, beating
):
    monkeypatch.setattr(agent, "HEARTBEAT_SECONDS", 0.1)
    monkeypatch.setattr(agent, "_heartbeat", agent._Heartbeat())  # not one asleep for 10 s
    if not beating:  # the control: a slow model alone would look dead
        monkeypatch.setattr(agent._heartbeat, "add", lambda *args: None)
    monkeypatch.setattr(services, "ABANDONED_AFTER_SECONDS", 0.6)
    _, pending = services.message_ask(conversation=conversation, content=QUESTION)

    def answer() -> None:
        generate(pending.pk, lambda *a: None, Slow(2.0))
        connections.close_all()

    thread = threading.Thread(target=answer)
    thread.start()
    swept = []
    while thread.is_alive():
        swept.append(services.message_interrupt_abandoned())
        thread.join(timeout=0.1)  # a sweep every 0.1 s while the answer runs
    thread.join()
    connections.close_all()
    assert len(swept) > 10
    pending.refresh_from_db()
    if beating:
        assert sum(swept) == 0
        assert (pending.status, pending.content) == ("complete", "Colons break URLs.")
    else:
        assert sum(swept) == 1
        assert (pending.status, pending.content) == ("interrupted", "")


# --- a real web process, killed mid-answer ----------------------------------------------------


def _asgi_application() -> Any:  # module level: the child process calls it
    from channels.routing import get_default_application

    return get_default_application()


def start_web() -> DaphneProcess:
    """daphne serving the ASGI application on a free port, forked from this process (it
    inherits the settings and the patched timings)."""
    return start_daphne(_asgi_application)


def tokens_of(message_id: int) -> Any:
    return lambda frame: f'id="message-{message_id}-text" hx-swap-oob="beforeend"' in frame


FULL_ANSWER = (
    "Colons break URLs only where the url package allows it, and it never breaks between "
    "two consecutive colons, because that would split a protocol name from its path."
)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_web_process_killed_mid_answer_leaves_it_interrupted_with_retry(
    alice, conversation, settings, monkeypatch
):
    monkeypatch.setattr(agent, "HEARTBEAT_SECONDS", 0.3)
    monkeypatch.setattr(agent, "_heartbeat", agent._Heartbeat())
    monkeypatch.setattr(services, "ABANDONED_AFTER_SECONDS", 3.0)
    browser = Client()
    browser.force_login(alice)
    browser.get("/")  # the CSRF cookie too
    cookie = "; ".join(f"{k}={v.value}" for k, v in browser.cookies.items())
    _, token = api_token_create(user=alice, name="crash test")

    with fake_chat_server() as fake:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{fake.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        # The model streams four pieces, then stalls until the test opens the gate.
        fake.script = [Answer(FULL_ANSWER, chunk_size=6, pause_after=4)]

        web = start_web()
        base = f"localhost:{web.port.value}"
        headers = {"Cookie": cookie, "Origin": f"http://{base}"}
        socket = Socket(f"ws://{base}/ws/chat/{conversation.pk}/", headers)
        socket.send({"action": "ask", "content": QUESTION})
        frames = socket.until(lambda f: '<div id="message-list"' in f)
        answer_id = int(re.findall(r'<article id="message-(\d+)"', frames[-1])[1])
        socket.until(tokens_of(answer_id))  # tokens flow: the answer is being written

        os.kill(web.pid, signal.SIGKILL)  # the web process dies mid-answer
        web.join(10)
        socket.close()
        fake.gate.set()  # the model's stalled stream may end now (nobody reads it)
        stuck = Message.objects.get(pk=answer_id)
        assert stuck.status == "streaming"
        assert FULL_ANSWER not in stuck.content

        web = start_web()  # restarted
        try:
            base = f"localhost:{web.port.value}"
            http = requests.Session()
            http.headers["Cookie"] = cookie
            page = http.get(f"http://{base}/chats/{conversation.pk}/", timeout=30).text
            # Still live, or already given up for dead: never presented as complete.
            assert answer_statuses(page) in (["streaming"], ["interrupted"])

            # The page polls the answer; once it has been silent long enough, it shows it
            # interrupted, with Retry.

            def interrupted() -> str:
                partial = http.get(f"http://{base}/chats/messages/{answer_id}/", timeout=30).text
                assert answer_statuses(partial) in (["streaming"], ["interrupted"])
                return partial if answer_statuses(partial) == ["interrupted"] else ""

            partial = wait_until(interrupted, 30, interval=0.5)
            assert INTERRUPTED in partial
            assert RETRY_BUTTON in partial
            page = http.get(f"http://{base}/chats/{conversation.pk}/", timeout=30).text
            assert INTERRUPTED in page
            assert RETRY_BUTTON in page
            api = requests.get(
                f"http://{base}/api/conversations/{conversation.pk}/messages",
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            ).json()["items"]
            saved = next(m for m in api if m["id"] == answer_id)
            assert (saved["status"], saved["error"]) == ("interrupted", services.INTERRUPTED_REASON)

            # Retry, over the restarted process's socket: the whole answer this time.
            fake.script = [Answer(FULL_ANSWER, chunk_size=6)]
            headers = {"Cookie": cookie, "Origin": f"http://{base}"}
            socket = Socket(f"ws://{base}/ws/chat/{conversation.pk}/", headers)
            socket.send({"action": "retry", "message_id": str(answer_id)})
            last = socket.until(final(answer_id), timeout=60)[-1]
            socket.close()
            assert "status-complete" in last
            done = Message.objects.get(pk=answer_id)
            assert (done.status, done.content, done.error) == ("complete", FULL_ANSWER, "")
            assert done.attempt == 2
            assert Message.objects.filter(conversation=conversation).count() == 2
        finally:
            web.terminate()
            web.join(10)
