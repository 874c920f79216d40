"""Login brute force (django-axes): failures lock that username from that address (IPv6: that
/64) only, for a cool-off, with a page that says until when; a success starts the count again;
the admin's login is covered too; logins without a request (manage.py, the test client) still
work."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from axes.models import AccessAttempt
from django.contrib.auth import authenticate
from django.db.models import F
from django.test import AsyncClient, Client, RequestFactory

from core.ratelimit import address_key, client_ip, client_network
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
PASSWORD = "Sturdy-Tulip-4821"
LOCKED = "Logging in as “dave” from your address is paused after too many wrong passwords."


@pytest.fixture
def dave(db):
    return UserFactory.create(username="dave", password=PASSWORD)


def log_in(client: Client, password: str, *, username: str = "dave", **extra):
    return client.post("/accounts/login/", {"username": username, "password": password}, **extra)


def logged_in(response) -> bool:
    return bool(response.status_code == 302 and response["Location"] == "/")


def fail(client: Client, times: int, **extra) -> list[int]:
    return [log_in(client, "wrong", **extra).status_code for _ in range(times)]


def test_five_failures_lock_that_username_from_that_address(anon_client, dave):
    assert fail(anon_client, 4) == [200, 200, 200, 200]
    fifth = log_in(anon_client, "wrong")
    assert fifth.status_code == 429
    page = fifth.content.decode()
    assert LOCKED in page
    assert "Try again in 15 minutes" in page
    assert 14 * 60 < int(fifth["Retry-After"]) <= 15 * 60
    # Now even the right password waits, and the page still says so.
    right = log_in(anon_client, PASSWORD)
    assert right.status_code == 429
    assert LOCKED in right.content.decode()
    assert "_auth_user_id" not in anon_client.session


def test_the_lockout_spares_other_addresses_and_other_users(anon_client, dave):
    UserFactory.create(username="erin", password=PASSWORD)
    fail(anon_client, 5)
    assert log_in(anon_client, PASSWORD).status_code == 429
    assert logged_in(log_in(Client(), PASSWORD, REMOTE_ADDR="192.0.2.7"))
    assert logged_in(log_in(Client(), PASSWORD, username="erin"))


def test_the_lockout_ends_after_the_cool_off(anon_client, dave):
    fail(anon_client, 5)
    assert log_in(anon_client, PASSWORD).status_code == 429
    # Attempts during the lockout did not extend it; let its 15 minutes pass.
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=15, seconds=1))
    assert logged_in(log_in(anon_client, PASSWORD))


def test_a_successful_login_starts_the_count_again(anon_client, dave):
    fail(anon_client, 4)
    assert logged_in(log_in(anon_client, PASSWORD))
    anon_client.post("/accounts/logout/")
    assert fail(anon_client, 4) == [200, 200, 200, 200]
    assert logged_in(log_in(anon_client, PASSWORD))


@pytest.mark.django_db(transaction=True)
def test_the_lockout_page_under_asgi(dave):
    """Under ASGI axes calls the lockout view with other arguments (request, credentials)."""

    async def go() -> list[int]:
        client = AsyncClient()
        data = {"username": "dave", "password": "wrong"}
        codes = [(await client.post("/accounts/login/", data)).status_code for _ in range(4)]
        locked = await client.post("/accounts/login/", data)
        assert LOCKED in locked.content.decode()
        return [*codes, locked.status_code]

    assert async_to_sync(go)() == [200, 200, 200, 200, 429]


def test_the_admin_login_is_locked_the_same_way(anon_client):
    UserFactory.create(username="dave", password=PASSWORD, is_staff=True)
    url = "/admin/login/"
    for _ in range(4):
        anon_client.post(url, {"username": "dave", "password": "wrong"})
    locked = anon_client.post(url, {"username": "dave", "password": "wrong"})
    assert locked.status_code == 429
    assert LOCKED in locked.content.decode()
    assert 'href="/admin/login/"' in locked.content.decode()


def test_the_lockout_page_escapes_the_username(anon_client):
    username = "<b>x</b>"
    for _ in range(5):
        response = log_in(anon_client, "wrong", username=username)
    assert response.status_code == 429
    assert "“&lt;b&gt;x&lt;/b&gt;”" in response.content.decode()


def test_logins_without_a_request_still_work(dave):
    assert authenticate(username="dave", password=PASSWORD) == dave
    assert authenticate(username="dave", password="wrong") is None
    client = Client()
    assert client.login(username="dave", password=PASSWORD)
    assert client.get("/").status_code == 200


def test_the_client_address_is_the_peer_unless_proxies_are_declared(settings):
    request = RequestFactory().get(
        "/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9, 198.51.100.4"
    )
    assert client_ip(request) == "10.0.0.1"
    settings.NUM_PROXIES = 1
    assert client_ip(request) == "198.51.100.4"  # what our proxy saw; the rest is the client's
    settings.NUM_PROXIES = 2
    assert client_ip(request) == "203.0.113.9"
    request.META["HTTP_X_FORWARDED_FOR"] = "not-an-address"
    assert client_ip(request) == "10.0.0.1"


def test_ipv6_failures_count_by_the_64_and_lock_it_out(anon_client, dave):
    # One client holds a whole /64 and can move around in it; rate limits count it as one too.
    assert fail(anon_client, 3, REMOTE_ADDR="2001:db8::1") == [200, 200, 200]
    assert fail(anon_client, 1, REMOTE_ADDR="2001:db8::2") == [200]
    locked = log_in(anon_client, "wrong", REMOTE_ADDR="2001:db8::ffff:1")
    assert locked.status_code == 429
    assert LOCKED in locked.content.decode()
    assert log_in(anon_client, PASSWORD, REMOTE_ADDR="2001:db8::3").status_code == 429
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"2001:db8::"}
    # Another /64 (even next door) and IPv4 are not locked.
    assert logged_in(log_in(Client(), PASSWORD, REMOTE_ADDR="2001:db8:0:1::1"))
    assert logged_in(log_in(Client(), PASSWORD))


def test_the_client_network_groups_ipv6_by_64_and_keeps_ipv4(settings):
    def network(address: str) -> str | None:
        return client_network(RequestFactory().get("/", REMOTE_ADDR=address))

    assert network("192.0.2.1") == "192.0.2.1"
    assert network("2001:db8:1:2:3:4:5:6") == "2001:db8:1:2::"
    assert network("::ffff:192.0.2.1") == "192.0.2.1"  # IPv4 on a dual-stack socket
    assert network("not-an-address") == "not-an-address"
    request = RequestFactory().get("/", REMOTE_ADDR="2001:db8::1")
    assert address_key(request) == "ip:2001:db8::"
    settings.NUM_PROXIES = 1
    request.META["HTTP_X_FORWARDED_FOR"] = "2001:db8:aa::5"
    assert address_key(request) == "ip:2001:db8:aa::"
