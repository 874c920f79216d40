"""A conversation socket lives only as long as the session that opened it: after a logout, or
a password change in another session, it closes (4401) and answers nothing more. Through the
real ASGI application (origin check, session auth, routing) with session cookies from real
logins; the logout and the password change go through their real URLs."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session
from django.test import Client

from chat import services
from chat.models import Conversation, Message
from notebook.asgi import application
from notes.services import note_create
from tests.factories import NotebookFactory
from tests.fixtures.sockets import Communicator

pytestmark = pytest.mark.django_db(transaction=True)  # Channels closes connections per query
PASSWORD = "correct horse battery staple"  # tests.factories.UserFactory's
NEW_PASSWORD = "a different, longer passphrase 47"
QUESTION = "Why does the url package refuse to break a line between two colons?"
TIMEOUT = 10
CLOSED = {"type": "websocket.close", "code": 4401}


@pytest.fixture
def askable(alice) -> Conversation:
    """A notebook chat over a note with text: a question here is saved and answered, so a
    socket that should have refused it would leave Messages behind."""
    notebook = NotebookFactory.create(owner=alice, title="TeX")
    note_create(
        notebook=notebook,
        author=alice,
        title="URLs",
        body="The url package never breaks a line between two consecutive colons.",
    )
    return services.conversation_create(owner=alice, notebook=notebook)


@pytest.fixture
def bare_conversation(alice) -> Conversation:
    """A conversation with nothing to search: questions there are refused, none saved."""
    return services.conversation_create(owner=alice, notebook=NotebookFactory.create(owner=alice))


def logged_in(username: str) -> Client:
    """A browser that logged in through the login page (and has its CSRF cookie)."""
    client = Client()
    response = client.post("/accounts/login/", {"username": username, "password": PASSWORD})
    assert response.status_code == 302, response
    client.get("/")
    return client


def socket(conversation_id: int, client: Client) -> WebsocketCommunicator:
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items()).encode()
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie)]
    return Communicator(application, f"/ws/chat/{conversation_id}/", headers=headers)


def ask_frame(content: str) -> str:
    return json.dumps({"action": "ask", "content": content, "HEADERS": {"HX-Request": "true"}})


def run(go: Callable[[], Awaitable[Any]]) -> Any:
    return async_to_sync(go)()


async def post(client: Client, url: str, data: dict[str, str] | None = None) -> Any:
    """A request from the same browser while the socket is open; as under the real server,
    the view runs in a thread of the socket's event loop."""
    return await sync_to_async(client.post)(url, data or {})


async def still_answers(communicator: WebsocketCommunicator) -> bool:
    """An empty question gets the form back with an error (and saves nothing): the socket is
    open and its session passed the check."""
    await communicator.send_to(text_data=ask_frame(""))
    frame = await communicator.receive_from(timeout=TIMEOUT)
    return frame.startswith('<form id="ask-form"') and 'data-testid="ask-error"' in frame


def test_logging_out_closes_that_sessions_open_socket(alice, askable):
    browser = logged_in("alice")

    async def go() -> tuple[dict[str, Any], bool]:
        communicator = socket(askable.pk, browser)
        assert (await communicator.connect())[0]
        assert await still_answers(communicator)  # the control
        response = await post(browser, "/accounts/logout/")
        assert response.status_code == 302
        closed = await communicator.receive_output(timeout=TIMEOUT)
        # A question the page sends anyway (it was already on its way) is not taken.
        await communicator.send_to(text_data=ask_frame(QUESTION))
        quiet = await communicator.receive_nothing(timeout=0.5)
        await communicator.disconnect()
        return dict(closed), quiet

    assert run(go) == (CLOSED, True)
    assert not Message.objects.exists()


def test_a_password_change_in_another_session_closes_the_open_socket(alice, askable):
    laptop, phone = logged_in("alice"), logged_in("alice")

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        on_laptop, on_phone = socket(askable.pk, laptop), socket(askable.pk, phone)
        assert (await on_laptop.connect())[0]
        assert (await on_phone.connect())[0]
        response = await post(
            phone,
            "/settings/password/",
            {
                "old_password": PASSWORD,
                "new_password1": NEW_PASSWORD,
                "new_password2": NEW_PASSWORD,
            },
        )
        assert response.status_code == 302
        assert response["Location"] == "/settings/password/done/"
        laptop_closed = await on_laptop.receive_output(timeout=TIMEOUT)
        # The phone's socket had the session key the change replaced: closed too (the page
        # falls back to plain posts, which carry the new cookie).
        phone_closed = await on_phone.receive_output(timeout=TIMEOUT)
        for communicator in (on_laptop, on_phone):
            await communicator.disconnect()
        return dict(laptop_closed), dict(phone_closed)

    assert run(go) == (CLOSED, CLOSED)
    assert phone.get("/settings/").status_code == 200  # the phone is still logged in
    assert laptop.get("/settings/").status_code == 302  # the laptop is not


def test_a_frame_on_a_socket_whose_session_is_gone_is_refused(alice, askable):
    """The per-frame check alone: the session row goes away with no group event (expired and
    cleared, or deleted by an administrator)."""
    browser = logged_in("alice")
    session_key = browser.session.session_key

    async def go() -> dict[str, Any]:
        communicator = socket(askable.pk, browser)
        assert (await communicator.connect())[0]
        await database_sync_to_async(Session.objects.filter(session_key=session_key).delete)()
        await communicator.send_to(text_data=ask_frame(QUESTION))
        closed = await communicator.receive_output(timeout=TIMEOUT)
        await communicator.disconnect()
        return dict(closed)

    assert run(go) == CLOSED
    assert not Message.objects.exists()


def test_a_frame_after_a_password_change_without_the_page_is_refused(alice, askable):
    """The password changed where no view tells the sockets (`manage.py changepassword`,
    the admin's form): the next frame finds the session's hash stale."""
    browser = logged_in("alice")

    def change_password() -> None:
        alice.set_password(NEW_PASSWORD)
        alice.save()

    async def go() -> dict[str, Any]:
        communicator = socket(askable.pk, browser)
        assert (await communicator.connect())[0]
        await database_sync_to_async(change_password)()
        await communicator.send_to(text_data=ask_frame(QUESTION))
        closed = await communicator.receive_output(timeout=TIMEOUT)
        await communicator.disconnect()
        return dict(closed)

    assert run(go) == CLOSED
    assert not Message.objects.exists()


def test_a_rotated_secret_key_keeps_sockets_open_while_the_old_one_is_a_fallback(
    alice, bare_conversation, settings
):
    browser = logged_in("alice")
    old_key = settings.SECRET_KEY

    async def go() -> tuple[bool, dict[str, Any]]:
        communicator = socket(bare_conversation.pk, browser)
        assert (await communicator.connect())[0]
        settings.SECRET_KEY = "a new secret key, long enough to be taken for real 0123456789"
        settings.SECRET_KEY_FALLBACKS = [old_key]
        answers = await still_answers(communicator)
        settings.SECRET_KEY_FALLBACKS = []
        await communicator.send_to(text_data=ask_frame(""))
        closed = await communicator.receive_output(timeout=TIMEOUT)
        await communicator.disconnect()
        return answers, dict(closed)

    assert run(go) == (True, CLOSED)


@pytest.mark.parametrize("who", ["bob", "alice on another device"])
def test_a_logout_elsewhere_leaves_this_socket_open(alice, bob, askable, who):
    """Bob logging out, or Alice logging out on her phone: her laptop's session is intact."""
    laptop, elsewhere = logged_in("alice"), logged_in("bob" if who == "bob" else "alice")

    async def go() -> tuple[bool, bool]:
        communicator = socket(askable.pk, laptop)
        assert (await communicator.connect())[0]
        assert (await post(elsewhere, "/accounts/logout/")).status_code == 302
        quiet = await communicator.receive_nothing(timeout=0.5)
        answers = await still_answers(communicator)
        await communicator.disconnect()
        return quiet, answers

    assert run(go) == (True, True)
    assert not Message.objects.exists()
