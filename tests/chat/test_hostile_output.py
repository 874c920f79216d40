"""A model's output is untrusted (a PDF can prompt-inject it): whatever Markdown or HTML it
writes, the page never loads a remote image, runs a handler or follows a script URL. Live, the
streamed tokens are text (escaped by the socket, never HTML); once done, and after a reload,
the answer is the server's sanitized rendering.

The "model" is the local fake OpenAI server (tests/fake_chat.py) emitting the hostile samples
of tests/test_markdown.py.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from django.test import Client

from chat import services
from chat.model_output import strip_special_tokens
from chat.models import Conversation, Message
from chat.rendering import answer_html, sources
from core.markdown import ALLOWED_TAGS
from notes.services import note_create
from tests.factories import NotebookFactory
from tests.fake_chat import Answer, Metadata, ToolCall, fake_chat_server
from tests.fixtures.markdown import (
    CHIP_TAGS,
    FORBIDDEN_ATTRIBUTES,
    HOSTILE_SAMPLES,
    assert_inert,
    elements,
    safe_href,
)
from tests.fixtures.sockets import (
    ask_frame,
    cookies_of,
    final,
    frames_until,
    run,
    socket,
    tokens_in,
)

pytestmark = pytest.mark.django_db
ANSWER_TAGS = set(ALLOWED_TAGS) | CHIP_TAGS
HOSTILE_ANSWER = "The sources say [1].\n\n" + "\n\n".join(HOSTILE_SAMPLES.values())
HOSTILE_QUERY = "<img src=https://attacker.example/q.png onerror=alert(1)>"
HOSTILE_FOLLOW_UP = '"><img src=https://attacker.example/f.png onerror=alert(1)>'
# Elements that load or run something; a page may hold none of them from a model's output.
DANGEROUS_TAGS = {"img", "svg", "iframe", "object", "embed", "style", "base", "picture",
                  "source", "math", "video", "audio", "frame", "image"}  # fmt: skip


def answer_div(page: str) -> str:
    found = re.search(r'data-testid="answer">(.*?)</div>', page, flags=re.S)
    assert found is not None, page[:500]
    return found.group(1)


def assert_page_inert(page: str) -> None:
    """Our templates' own markup may carry htmx attributes and load our scripts; nothing may
    load from elsewhere or run inline."""
    for tag, attrs in elements(page):
        assert tag not in DANGEROUS_TAGS, f"<{tag} {attrs}>"
        for name, value in attrs.items():
            assert not re.match(r"^(on|style$|srcset$|background$|formaction$)", name), (
                f"{name}= on <{tag}>"
            )
            if name == "src":
                assert tag == "script", f"<{tag} src={value}>"
                # Our files, and Django's JavaScript translation catalogue (our own view).
                assert value.startswith("/static/") or value == "/jsi18n/", f"<{tag} src={value}>"
            if name in ("href", "action"):
                assert safe_href(value), f"<{tag} {name}={value!r}>"


@pytest.fixture
def conversation(alice) -> Conversation:
    """A notebook chat with a written note: searchable without a PDF or a worker."""
    notebook = NotebookFactory.create(owner=alice, title="Injected")
    note_create(notebook=notebook, author=alice, title="Plain", body="Colons and slashes.")
    return services.conversation_create(owner=alice, notebook=notebook)


@pytest.fixture
def hostile_model(settings):
    """The chat model: searches with a hostile query, then answers with every hostile sample
    and suggests a hostile follow-up."""
    with fake_chat_server() as server:
        server.script = [
            ToolCall("document_search", {"query": HOSTILE_QUERY}),
            Answer(HOSTILE_ANSWER, chunk_size=7),
            Metadata(
                {
                    "confidence": "high",
                    "follow_ups": [HOSTILE_FOLLOW_UP],
                    "answerable": True,
                    "citations": [{"n": 1, "quote": "<img src=https://attacker.example/c.png>"}],
                }
            ),
        ]
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        yield server


def saved_answer(conversation: Conversation, content: str, **fields: Any) -> Message:
    question = Message.objects.create(conversation=conversation, role="user", content="Why?")
    return Message.objects.create(
        conversation=conversation,
        role="assistant",
        reply_to=question,
        content=content,
        **{"status": "complete", "answerer": "llm", **fields},
    )


def test_a_hostile_answer_with_citations_renders_inert(conversation):
    citation = {
        "n": 1,
        "kind": "document",
        "attachment_id": 7,
        "page": 2,
        "chunk_id": 1,
        "file": '"><img src=x>.pdf',
        "quote": "<img src=https://attacker.example/q.png>",
    }
    message = saved_answer(conversation, HOSTILE_ANSWER + " [1] [2]", citations=[citation])
    html = str(answer_html(message, sources(message)))
    assert_inert(html, ANSWER_TAGS)
    assert html.count('data-testid="citation-chip"') == 2  # a verified citation: chips
    assert "cite-unverified" in html  # [2]: text


@pytest.mark.parametrize("name", sorted(HOSTILE_SAMPLES))
def test_each_hostile_sample_in_a_saved_answer_renders_inert(conversation, name):
    message = saved_answer(conversation, f"{HOSTILE_SAMPLES[name]} [1]")
    assert_inert(str(answer_html(message)), ANSWER_TAGS)


def test_the_text_so_far_of_an_answer_being_written_is_text(alice_client, conversation):
    message = saved_answer(conversation, HOSTILE_ANSWER, status="streaming")
    page = alice_client.get(f"/chats/{conversation.pk}/").content.decode()
    streaming = re.search(
        rf'<div class="streaming-text" id="message-{message.pk}-text">(.*?)</div>', page, re.S
    )
    assert streaming is not None
    assert "<" not in streaming.group(1)  # every tag of the model is escaped text
    assert_page_inert(page)


@pytest.mark.django_db(transaction=True)  # the answer is written in the runner's thread
def test_hostile_model_output_is_text_live_and_sanitized_when_done_and_after_reload(
    alice, conversation, hostile_model
):
    cookie = cookies_of(alice)

    async def go() -> list[str]:
        communicator = socket(conversation.pk, cookie)
        assert (await communicator.connect())[0]
        question = "What does Plain say about colons and slashes?"  # the sources answer it
        await communicator.send_to(text_data=ask_frame(question))
        await communicator.receive_from(timeout=30)  # the ask form, emptied
        shown = await communicator.receive_from(timeout=30)
        answer_id = int(re.findall(r'<article id="message-(\d+)"', shown)[1])
        rest = await frames_until(communicator, final(answer_id))
        await communicator.disconnect()
        return [shown, *rest]

    _, *frames = run(go)
    answer = Message.objects.get(role="assistant")
    for thread in threading.enumerate():  # let the runner close its database connection
        if thread.name == f"answer-{answer.pk}":
            thread.join(30)
    assert answer.status == "complete", answer.error
    assert answer.answerer == "llm"

    # Live: tokens and the tool status are text in our own two elements, nothing more.
    live = [f for f in frames if "hx-swap-oob" in f and not f.startswith("<article")]
    assert live
    for frame in live:
        assert {tag for tag, _ in elements(frame)} <= {"span", "p"}, frame
        assert "<img" not in frame.lower()
    statuses = [f for f in live if "Searching documents for" in f]
    assert any("&lt;img src=https://attacker.example/q.png" in f for f in statuses)
    # As written, but for entities outside code, decoded as Markdown would show them anyway
    # (chat.model_output); the frames above show they still arrive as text.
    assert tokens_in(frames, answer.pk) == strip_special_tokens(HOSTILE_ANSWER)

    # Done: the whole message again, rendered and sanitized on the server.
    done = frames[-1]
    assert_inert(answer_div(done), ANSWER_TAGS)
    assert_page_inert(done)
    assert 'value="&quot;&gt;&lt;img src=https://attacker.example/f.png' in done  # follow-up

    # After a reload: the same, from the database (the page, and the message partial).
    client = Client()
    client.force_login(alice)
    page = client.get(f"/chats/{conversation.pk}/").content.decode()
    assert_inert(answer_div(page), ANSWER_TAGS)
    assert_page_inert(page)
    assert answer_div(page).strip() == answer_div(done).strip()
    partial = client.get(f"/chats/messages/{answer.pk}/").content.decode()
    assert_inert(answer_div(partial), ANSWER_TAGS)
    assert_page_inert(partial)


def test_forbidden_attributes_are_recognised():
    # The checks above are only as good as this pattern.
    for name in ("onerror", "onload", "style", "src", "srcset", "hx-get", "hx-on:click"):
        assert FORBIDDEN_ATTRIBUTES.match(name), name
    for name in ("href", "title", "class", "rel", "start", "align"):
        assert not FORBIDDEN_ATTRIBUTES.match(name), name
