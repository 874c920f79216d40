"""bench/load.py's pieces without a server: it reads what the real chat consumer sends, and
Django parses the upload bodies it builds."""

from __future__ import annotations

import importlib
import sys
import types

import pytest
from asgiref.sync import async_to_sync
from django.test import RequestFactory

from chat import consumers
from chat.forms import AskForm
from chat.models import Message
from chat.services import conversation_create
from tests.factories import NotebookFactory


@pytest.fixture(scope="module")
def load():
    """bench.load with autobahn's asyncio client stubbed: txaio runs one framework per process,
    and in this one daphne has already chosen Twisted. The bench itself runs on asyncio."""
    stub = types.ModuleType("autobahn.asyncio.websocket")
    stub.WebSocketClientFactory = object  # type: ignore[attr-defined]
    stub.WebSocketClientProtocol = object  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "autobahn.asyncio.websocket", stub)
        mp.delitem(sys.modules, "bench.load", raising=False)
        yield importlib.import_module("bench.load")
    sys.modules.pop("bench.load", None)


def test_percentile_interpolates_between_ranks(load):
    assert load.percentile([], 50) is None
    assert load.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert load.percentile([0.0, 10.0], 95) == pytest.approx(9.5)


def test_a_phase_reports_the_cpu_each_tree_used_in_it(load):
    """CPU seconds per process tree over a phase: the difference of two readings; a tree that
    was not there at both readings (the worker not started yet) is left out."""
    stats = load.PhaseStats("phase 2", cpu_before={"web": 10.0, "postgres": 2.0, "worker": 1.0})
    stats.finish()
    stats.cpu_after = {"web": 34.25, "postgres": 11.5}
    assert stats.summary()["cpu_seconds"] == {"web": 24.2, "postgres": 9.5}
    assert "cpu_seconds" not in load.PhaseStats("phase 1").summary()


def test_route_leaves_ids_out_of_error_kinds(load):
    assert load.route("/api/notes/12/attachments?x=1") == "/api/notes/{id}/attachments"


def test_multipart_body_is_what_django_parses(load):
    body, content_type = load.multipart(
        "files", [("a.pdf", b"%PDF-1.4 one", "application/pdf"), ('b".pdf', b"two", "x/y")]
    )
    request = RequestFactory().generic("POST", "/", body, content_type=content_type)
    files = request.FILES.getlist("files")
    assert [f.read() for f in files] == [b"%PDF-1.4 one", b"two"]
    assert files[0].name == "a.pdf"


@pytest.mark.django_db
def test_parse_frame_reads_the_consumer_partials(load, alice):
    conversation = conversation_create(owner=alice, notebook=NotebookFactory.create(owner=alice))
    question = Message.objects.create(conversation=conversation, role="user", content="Why?")
    answer = Message.objects.create(
        conversation=conversation, role="assistant", status="pending", reply_to=question
    )
    shown = consumers.show_html(
        alice, {"type": "chat.show", "question_id": question.pk, "answer_id": answer.pk}, ""
    )
    assert load.parse_frame(shown).answer_id == answer.pk

    answer.status = "streaming"
    answer.save()
    assert load.parse_frame(consumers.message_html(alice, answer.pk, "")).final_id is None

    answer.status, answer.content, answer.answerer = "complete", "Because.", "extractive"
    answer.save()
    done = load.parse_frame(consumers.message_html(alice, answer.pk, ""))
    assert (done.final_id, done.final_status, done.error) == (answer.pk, "complete", "")

    answer.status, answer.error = "error", "Generation crashed. Try again."
    answer.save()
    failed = load.parse_frame(consumers.message_html(alice, answer.pk, ""))
    assert (failed.final_status, failed.error) == ("error", "Generation crashed. Try again.")

    form = AskForm({"content": "Why?"})
    form.is_valid()
    form.add_error(None, "You are asking questions too fast.")
    assert load.parse_frame(consumers._form_html(conversation, form, "")).refused == (
        "You are asking questions too fast."
    )
    assert load.parse_frame(consumers._form_html(conversation, AskForm(), "")).refused is None


def test_parse_frame_reads_a_token(load):
    consumer = consumers.ChatConsumer()
    consumer.writing = set()
    sent: list[str] = []

    async def send(text_data: str) -> None:
        sent.append(text_data)

    consumer.send = send
    event = {"type": "chat.event", "event": "token", "data": {"message_id": 7, "text": "Hi"}}
    async_to_sync(consumer.chat_event)(event)
    assert load.parse_frame(sent[0]).token_for == 7
