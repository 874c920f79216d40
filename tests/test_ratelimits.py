"""Rate limits: questions and retries (page, socket, API, one budget), uploaded files (page,
API), wrong API tokens (per address and per token prefix; right tokens always pass) and
sign-ups (per address) answer 429 with when to come back, store nothing, and leave other users
and addresses alone. The window slides: no window of one period passes more than the limit."""

from __future__ import annotations

import json
import threading

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client

from accounts.services import api_token_create
from attachments.models import NoteAttachment
from chat import services
from chat.models import Conversation, Message
from core import ratelimit
from core.ratelimit import RateLimited, rate_limit, user_key
from notebook.env import env_rate
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import sample
from tests.fixtures.sockets import ask_frame, cookies_of, socket

pytestmark = pytest.mark.django_db
CHAT_REFUSAL = "You are asking questions too fast (at most 2 an hour). Try again in"
UPLOAD_REFUSAL = "You are uploading too fast (at most 2 files an hour). Try again in"
TOKEN_REFUSAL = "Too many requests with a wrong API token (at most 3 an hour from one address,"
SIGNUP_REFUSAL = "Too many sign-up attempts from your address (at most 2 an hour). Try again in"


@pytest.fixture(autouse=True)
def _tight_limits(settings):
    # Hourly windows: a window that ends during a test (and lets a refused request through)
    # is a 1 in 3,600 chance per second of test, not 1 in 60.
    settings.RATE_LIMITS = {"chat": "2/h", "upload": "2/h", "token": "3/h", "signup": "2/h"}
    yield
    caches["ratelimit"].clear()  # the tests that commit leave their counts behind otherwise


def chat_about_notes(user) -> Conversation:
    """A notebook conversation with a note to search, so that asking gets as far as saving."""
    notebook = NotebookFactory.create(owner=user)
    NoteFactory.create(notebook=notebook, author=user, body="Colons break nothing.")
    return services.conversation_create(owner=user, notebook=notebook)


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def pdf(name: str) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, sample(name), "application/pdf")


def assert_retry_after(response) -> None:
    # An hour, and up to a slice (a tenth) more: what is counted leaves slice by slice.
    assert 0 < int(response["Retry-After"]) <= 3600 + 360


def first_reply(user, conversation_id: int, text_data: str) -> str:
    """The first frame the chat socket sends back after `text_data`, as `user`."""
    cookie = cookies_of(user)

    async def go() -> str:
        communicator = socket(conversation_id, cookie)
        connected, _ = await communicator.connect()
        assert connected
        await communicator.send_to(text_data=text_data)
        frame = await communicator.receive_from(timeout=30)
        await communicator.disconnect()
        return str(frame)

    return async_to_sync(go)()


# --- questions ---------------------------------------------------------------------------------


def test_a_question_beyond_the_limit_is_refused_on_the_page_and_kept_in_the_form(
    alice_client, alice, bob
):
    conversation = chat_about_notes(alice)
    url = f"/chats/{conversation.pk}/ask/"
    for _ in range(2):
        assert alice_client.post(url, {"content": "Colons?"}).status_code == 302
    refused = alice_client.post(url, {"content": "And slashes?"})
    assert refused.status_code == 429
    assert_retry_after(refused)
    page = refused.content.decode()
    assert CHAT_REFUSAL in page
    assert "And slashes?" in page
    assert Message.objects.filter(conversation=conversation).count() == 4  # two asked, two answers

    fragment = alice_client.post(url, {"content": "Again?"}, headers={"HX-Request": "true"})
    assert fragment.status_code == 429
    assert fragment.content.decode().startswith('<form id="ask-form"')
    assert CHAT_REFUSAL in fragment.content.decode()

    bobs = chat_about_notes(bob)
    assert client_of(bob).post(f"/chats/{bobs.pk}/ask/", {"content": "Hi?"}).status_code == 302


def test_the_api_shares_the_question_budget_and_answers_429_json(
    alice_client, alice_api, alice, bob
):
    conversation = chat_about_notes(alice)
    for _ in range(2):
        alice_client.post(f"/chats/{conversation.pk}/ask/", {"content": "Colons?"})
    url = f"/api/conversations/{conversation.pk}/messages"
    refused = alice_api.post(url, {"content": "More?"}, content_type="application/json")
    assert refused.status_code == 429
    assert_retry_after(refused)
    assert set(refused.json()) == {"detail"}
    assert refused.json()["detail"].startswith(CHAT_REFUSAL)
    assert Message.objects.filter(conversation=conversation).count() == 4

    # Bob's budget is whole: his question gets as far as the next check (nothing to search).
    bobs = services.conversation_create(owner=bob, notebook=NotebookFactory.create(owner=bob))
    _, raw = api_token_create(user=bob, name="script")
    bob_api = Client(headers={"Authorization": f"Bearer {raw}"})
    answer = bob_api.post(
        f"/api/conversations/{bobs.pk}/messages",
        {"content": "Hi?"},
        content_type="application/json",
    )
    assert answer.status_code == 422


@pytest.mark.django_db(transaction=True)
def test_the_socket_shows_the_refusal_in_the_ask_form_and_saves_nothing(alice):
    conversation = chat_about_notes(alice)
    for _ in range(2):
        rate_limit(scope="chat", key=user_key(alice))
    frame = first_reply(alice, conversation.pk, ask_frame("Colons?"))
    assert frame.startswith('<form id="ask-form"')
    assert 'hx-swap-oob="true"' in frame
    assert CHAT_REFUSAL in frame
    assert "Colons?</textarea>" in frame  # the question is kept
    assert not Message.objects.exists()


def failed_answer(user) -> Message:
    _, answer = services.message_ask(conversation=chat_about_notes(user), content="Colons?")
    Message.objects.filter(pk=answer.pk).update(status="error", error="The model was down.")
    return answer


def test_a_retry_spends_the_question_budget_on_the_page_and_the_api(alice_client, alice_api, alice):
    answer = failed_answer(alice)
    for _ in range(2):
        rate_limit(scope="chat", key=user_key(alice))

    refused = alice_client.post(f"/chats/messages/{answer.pk}/retry/")
    assert refused.status_code == 429
    assert_retry_after(refused)
    assert CHAT_REFUSAL in refused.content.decode()
    by_api = alice_api.post(f"/api/messages/{answer.pk}/retry")
    assert by_api.status_code == 429
    assert_retry_after(by_api)
    assert by_api.json()["detail"].startswith(CHAT_REFUSAL)
    answer.refresh_from_db()
    assert (answer.status, answer.attempt) == ("error", 0)  # not started again


@pytest.mark.django_db(transaction=True)
def test_a_retry_over_the_socket_shows_the_refusal_and_changes_nothing(alice):
    answer = failed_answer(alice)
    for _ in range(2):
        rate_limit(scope="chat", key=user_key(alice))
    retry = json.dumps({"action": "retry", "message_id": str(answer.pk)})
    frame = first_reply(alice, answer.conversation_id, retry)
    assert frame.startswith('<form id="ask-form"')
    assert CHAT_REFUSAL in frame
    answer.refresh_from_db()
    assert (answer.status, answer.attempt) == ("error", 0)


# --- uploads -----------------------------------------------------------------------------------


def test_uploads_count_files_and_a_refused_batch_stores_and_spends_nothing(
    alice_client, alice, bob
):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), author=alice)
    url = f"/notes/{note.pk}/attachments/"
    xhr = {"X-Upload": "1"}
    assert alice_client.post(url, {"files": [pdf("text.pdf")]}, headers=xhr).status_code == 201
    two = {"files": [pdf("broken.pdf"), pdf("other.pdf")]}
    refused = alice_client.post(url, two, headers=xhr)
    assert refused.status_code == 429
    assert_retry_after(refused)
    assert refused["X-Notebook-Fragment"] == "attachment-rows"  # upload.js shows the row
    assert UPLOAD_REFUSAL in refused.content.decode()
    assert NoteAttachment.objects.count() == 1
    # The refusal spent nothing: one file still fits, and then the plain form is refused too.
    assert alice_client.post(url, {"files": [pdf("other.pdf")]}, headers=xhr).status_code == 201
    page = alice_client.post(url, {"files": [pdf("broken.pdf")]})
    assert page.status_code == 429
    assert UPLOAD_REFUSAL in page.content.decode()
    assert f'href="/notes/{note.pk}/"' in page.content.decode()
    assert NoteAttachment.objects.count() == 2

    bobs = NoteFactory.create(notebook=NotebookFactory.create(owner=bob), author=bob)
    bob_client = client_of(bob)
    answer = bob_client.post(f"/notes/{bobs.pk}/attachments/", {"files": [pdf("text.pdf")]})
    assert answer.status_code == 302
    assert NoteAttachment.objects.filter(uploaded_by=bob).count() == 1


def test_the_upload_api_answers_429_json_and_stores_nothing(alice_api, alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), author=alice)
    files = [pdf("text.pdf"), pdf("broken.pdf"), pdf("other.pdf")]
    refused = alice_api.post(f"/api/notes/{note.pk}/attachments", {"files": files})
    assert refused.status_code == 429
    assert_retry_after(refused)
    assert refused.json()["detail"].startswith(UPLOAD_REFUSAL)
    assert not NoteAttachment.objects.exists()
    two = [pdf("text.pdf"), pdf("broken.pdf")]
    ok = alice_api.post(f"/api/notes/{note.pk}/attachments", {"files": two})
    assert ok.status_code == 201


# --- wrong API tokens --------------------------------------------------------------------------


def test_wrong_tokens_from_one_address_are_refused_and_others_carry_on(alice, alice_token, bob):
    wrong = Client(headers={"Authorization": "Bearer nbk_guess"})
    assert [wrong.get("/api/me").status_code for _ in range(3)] == [401, 401, 401]
    refused = wrong.get("/api/me")
    assert refused.status_code == 429
    assert_retry_after(refused)
    assert refused.json()["detail"].startswith(TOKEN_REFUSAL)
    # Another token from that address is refused too (the address's budget is spent) ...
    other = Client(headers={"Authorization": "Bearer nbk_other_guess"})
    assert other.get("/api/me").status_code == 429
    # ... but not from another address, and the browser's session is not a token: it is not
    # counted and not refused.
    assert other.get("/api/me", REMOTE_ADDR="192.0.2.7").status_code == 401
    assert client_of(bob).get("/api/me").json()["username"] == "bob"


def test_a_right_token_works_from_an_address_whose_failures_are_spent(alice, alice_token):
    # Someone behind the same NAT (or the same /64) guessing cannot lock Alice's script out.
    for n in range(4):
        Client(headers={"Authorization": f"Bearer nbk_guess{n}"}).get("/api/me")
    assert Client(headers={"Authorization": "Bearer nbk_guess"}).get("/api/me").status_code == 429
    right = Client(headers={"Authorization": f"Bearer {alice_token}"})
    assert right.get("/api/me").json()["username"] == "alice"
    for n in range(4):
        guesser = Client(headers={"Authorization": f"Bearer nbk_v6guess{n}"})
        guesser.get("/api/me", REMOTE_ADDR="2001:db8::1")
    assert right.get("/api/me", REMOTE_ADDR="2001:db8::2").json()["username"] == "alice"


def test_one_wrong_token_is_refused_from_every_address_once_its_budget_is_spent():
    # A guessing run keeps its first characters; spread over addresses it is still counted.
    addresses = ["192.0.2.1", "198.51.100.2", "2001:db8::1", "203.0.113.4"]
    codes = [
        Client(headers={"Authorization": f"Bearer nbk_AAAAAAAA{n}"})
        .get("/api/me", REMOTE_ADDR=address)
        .status_code
        for n, address in enumerate(addresses)
    ]
    assert codes == [401, 401, 401, 429]
    # Another token from the fourth address still gets a plain 401.
    fresh = Client(headers={"Authorization": "Bearer nbk_BBBBBBBB"})
    assert fresh.get("/api/me", REMOTE_ADDR="203.0.113.4").status_code == 401


def test_a_right_token_spends_nothing(alice_token):
    right = Client(headers={"Authorization": f"Bearer {alice_token}"})
    assert {right.get("/api/me").status_code for _ in range(5)} == {200}


# --- sign-ups ----------------------------------------------------------------------------------


def test_signups_from_one_address_are_refused_beyond_the_limit(anon_client, settings):
    weak = {"username": "carol", "password1": "123", "password2": "123"}
    assert [anon_client.post("/accounts/signup/", weak).status_code for _ in range(2)] == [200, 200]
    good = {"username": "carol", "password1": "Sturdy-Tulip-4821", "password2": "Sturdy-Tulip-4821"}
    refused = anon_client.post("/accounts/signup/", good)
    assert refused.status_code == 429
    assert_retry_after(refused)
    page = refused.content.decode()
    assert SIGNUP_REFUSAL in page
    assert 'href="/accounts/signup/"' in page
    assert not User.objects.filter(username="carol").exists()
    assert anon_client.get("/accounts/signup/").status_code == 200  # looking costs nothing
    # Another address signs up; with SIGNUP=invite, guessing invitations spends the budget too.
    elsewhere = anon_client.post("/accounts/signup/", good, REMOTE_ADDR="192.0.2.7")
    assert elsewhere.status_code == 302
    settings.SIGNUP = "invite"
    guesses = [
        Client().post("/accounts/signup/", {"invite": f"guess{n}"}, REMOTE_ADDR="192.0.2.8")
        for n in range(3)
    ]
    assert [guess.status_code for guess in guesses] == [403, 403, 429]
    assert 'href="/accounts/signup/?invite=guess2"' in guesses[2].content.decode()


# --- the parts ---------------------------------------------------------------------------------


class Clock:
    """core.ratelimit's clock, moved by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock(1_700_000_040.0)  # the start of a minute
    monkeypatch.setattr(ratelimit, "_clock", clock)
    return clock


def passed(count: int, key: str) -> int:
    """How many of `count` questions at once pass."""
    n = 0
    for _ in range(count):
        try:
            rate_limit(scope="chat", key=key)
            n += 1
        except RateLimited:
            pass
    return n


def test_bursts_across_a_window_edge_pass_the_limit_once_in_a_minute(settings, clock):
    settings.RATE_LIMITS = {"chat": "10/m"}
    # A burst every ten seconds for a minute: a fixed window, whatever its phase, ends between
    # two of them, and the burst after its end would pass as well as the one before.
    bursts = []
    for _ in range(7):
        bursts.append(passed(10, "user:1"))
        clock.now += 10
    assert bursts == [10, 0, 0, 0, 0, 0, 0]
    clock.now += 70 - 66  # the first burst has left the window (within a tenth of a minute)
    assert passed(10, "user:1") == 10
    assert passed(10, "user:2") == 10  # others count apart


def test_a_refusal_says_when_enough_of_the_window_has_passed(settings, clock):
    settings.RATE_LIMITS = {"chat": "3/m"}
    for step in (0, 20, 20):  # one question at 0 s, 20 s and 40 s
        clock.now += step
        rate_limit(scope="chat", key="user:1")
    clock.now += 5
    with pytest.raises(RateLimited) as refused:
        rate_limit(scope="chat", key="user:1")
    wait = refused.value.retry_after
    # The first question leaves the count within a tenth of a minute after it is a minute old.
    assert 60 - 45 <= wait <= 60 + 6 - 45
    clock.now += wait - 1
    with pytest.raises(RateLimited):
        rate_limit(scope="chat", key="user:1")
    clock.now += 1
    rate_limit(scope="chat", key="user:1")  # one left the window: one fits
    with pytest.raises(RateLimited):
        rate_limit(scope="chat", key="user:1")


def test_a_cost_beyond_the_limit_is_refused_for_a_whole_period(settings, clock):
    settings.RATE_LIMITS = {"upload": "2/h"}
    with pytest.raises(RateLimited) as refused:
        rate_limit(scope="upload", key="user:1", cost=3)
    assert refused.value.retry_after == 3600
    rate_limit(scope="upload", key="user:1", cost=2)  # the refusal spent nothing


def test_rates_are_checked_when_settings_load(monkeypatch):
    for bad in ("30", "30/x", "0/m", "30/0m", "lots/m"):
        monkeypatch.setenv("X_RATE", bad)
        with pytest.raises(ImproperlyConfigured, match="X_RATE"):
            env_rate("X_RATE", "30/m")
    monkeypatch.setenv("X_RATE", " 100/15M ")
    assert env_rate("X_RATE", "30/m") == "100/15m"


def test_a_refusal_says_when_in_words():
    assert "Try again in 1 second." in RateLimited("chat", retry_after=0).message
    assert "Try again in 42 seconds." in RateLimited("chat", retry_after=42).message
    assert "Try again in 2 minutes." in RateLimited("chat", retry_after=61).message


@pytest.mark.django_db(transaction=True)
def test_the_database_cache_counts_every_hit_at_the_same_moment():
    cache = caches["ratelimit"]
    cache.add("hits", 0, 600)
    ready = threading.Barrier(4)

    def hit() -> None:
        ready.wait()
        for _ in range(25):
            cache.incr("hits")
        connection.close()

    threads = [threading.Thread(target=hit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.get("hits") == 100
    with pytest.raises(ValueError, match="not found"):
        cache.incr("missing")
