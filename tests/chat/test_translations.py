"""The chat pages and the chat socket in the browser's language: the workspace and a
conversation in German and Simplified Chinese (Accept-Language, or the language cookie of
Settings → Language), and an answer streamed over the socket in German. Needs the compiled
catalogues (locale/*/LC_MESSAGES/*.mo; manage.py compiletranslations)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from chat import services
from chat.models import Conversation, Message
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.sockets import (
    QUESTION,
    TIMEOUT,
    Communicator,
    answer_id_in,
    ask_frame,
    cookies_of,
    final,
    frames_until,
    run,
)


def page(client: Client, url: str, language: str) -> str:
    response = client.get(url, HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


@pytest.fixture
def notebook(alice):
    return NotebookFactory.create(owner=alice, title="TeX")


@pytest.fixture
def answered(alice, notebook) -> Conversation:
    """A conversation with one finished answer of the offline answerer (one citation)."""
    note = NoteFactory.create(notebook=notebook, author=alice, title="URLs", body="Colons.")
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    question = Message.objects.create(
        conversation=conversation, role=Message.Role.USER, content="What about colons?"
    )
    Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        reply_to=question,
        status=Message.Status.COMPLETE,
        answerer="extractive",
        confidence="high",
        content="Breaks are not allowed between colons [1].",
        citations=[
            {"n": 1, "kind": "note", "note_id": note.pk, "note_title": "URLs", "quote": "Colons."}
        ],
    )
    return conversation


@pytest.mark.django_db
def test_the_workspace_follows_the_browsers_language(alice_client, notebook):
    url = reverse("workspace:page", args=[notebook.pk])
    german = page(alice_client, url, "de-DE,de;q=0.9,en;q=0.5")
    assert '<html lang="de"' in german
    assert "Stell deine erste Frage." in german
    assert (
        "<strong>Quellen hinzufügen</strong>: zieh Dateien hierher (PDF, Word, PowerPoint, "
        "Excel, EPUB, HTML, Untertitel, Audio, Bilder, Markdown, Text), oder" in german
    )
    assert ">Erkunden</option>" in german  # the mode labels of the form
    assert "Ask your first question." not in german
    chinese = page(alice_client, url, "zh-CN,zh;q=0.9")
    assert "提出你的第一个问题。" in chinese
    assert "<strong>添加来源</strong>" in chinese
    english = page(alice_client, url, "en-GB,en;q=0.9")
    assert "Ask your first question." in english
    assert (
        "<strong>Add sources</strong>: drop files here (PDF, Word, PowerPoint, Excel, EPUB, "
        "HTML, subtitles, audio, images, Markdown, text), or" in english
    )


@pytest.mark.django_db
def test_a_conversation_page_in_german_and_chinese(alice_client, answered):
    url = reverse("chat:conversation", args=[answered.pk])
    german = page(alice_client, url, "de")
    assert ">Zitierte Antwort</span>" in german
    assert 'data-testid="save-to-note"' in german
    assert ">In Notiz speichern</button>" in german
    assert ">Hohe Übereinstimmung</span>" in german
    assert ">Verdichten</button>" in german
    assert 'aria-label="Quellen"' in german
    chinese = page(alice_client, url, "zh-Hans")
    assert ">摘录式回答</span>" in chinese
    assert ">保存到笔记</button>" in chinese
    assert "关于笔记本“TeX”：其中的笔记和 PDF" in chinese
    # Settings → Language (the cookie) wins over the browser.
    alice_client.cookies[settings.LANGUAGE_COOKIE_NAME] = "de"
    assert ">In Notiz speichern</button>" in page(alice_client, url, "zh-Hans")


@pytest.mark.django_db
def test_a_refusal_is_in_the_pages_language(alice_client, notebook):
    url = reverse("workspace:ask", args=[notebook.pk])
    response = alice_client.post(url, {"content": "  "}, HTTP_ACCEPT_LANGUAGE="de")
    assert response.status_code == 400
    assert "Gib zuerst eine Frage ein." in response.content.decode()


# --- the socket -------------------------------------------------------------------------------


def german_socket(conversation_id: int, cookie: bytes):
    from notebook.asgi import application

    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"cookie", cookie),
        (b"accept-language", b"de-DE,de;q=0.9,en;q=0.5"),
    ]
    return Communicator(application, f"/ws/chat/{conversation_id}/", headers=headers)


@pytest.mark.django_db(transaction=True)
def test_a_streamed_answer_comes_in_german_for_a_german_browser(alice, library):
    conversation = services.conversation_create(
        owner=alice, notebook=library["notebook"], note=library["note"]
    )
    cookie = cookies_of(alice)

    async def go() -> list[str]:
        communicator = german_socket(conversation.pk, cookie)
        assert (await communicator.connect())[0]
        await communicator.send_to(text_data=ask_frame(QUESTION))
        form = await communicator.receive_from(timeout=TIMEOUT)
        shown = await communicator.receive_from(timeout=TIMEOUT)
        rest = await frames_until(communicator, final(answer_id_in(shown)))
        await communicator.disconnect()
        return [form, shown, *rest]

    form, shown, *rest = run(go)
    assert ">Fragen</button>" in form  # the emptied ask form
    assert "Denkt nach…" in shown  # the answer's placeholder
    status = next(f for f in rest if 'data-testid="tool-status"' in f)
    assert "Suche in Dokumenten nach „" in status
    assert any("Antwort wird geschrieben…" in f for f in rest)
    last = rest[-1]
    assert "status-complete" in last
    assert ">Zitierte Antwort</span>" in last
    assert ">In Notiz speichern</button>" in last
    assert "Extractive answer" not in last
    # What is saved stays as the answerer wrote it: the tool's own summary is English.
    answer = Message.objects.get(pk=answer_id_in(shown))
    assert answer.tool_calls[0]["summary"].startswith("Searching documents for ‘")


@pytest.mark.django_db(transaction=True)
def test_a_refusal_over_the_socket_follows_the_language_cookie(alice, notebook):
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    cookie = cookies_of(alice) + f"; {settings.LANGUAGE_COOKIE_NAME}=zh-hans".encode()

    async def go() -> str:
        communicator = german_socket(conversation.pk, cookie)
        assert (await communicator.connect())[0]
        await communicator.send_to(text_data=ask_frame(""))
        frame = await communicator.receive_from(timeout=TIMEOUT)
        await communicator.disconnect()
        return str(frame)

    frame = run(go)
    assert 'data-testid="ask-error"' in frame
    assert "请先输入问题。" in frame
    assert "Type a question first." not in frame
