"""Forgot your password: Django's flow with our pages. The same answer whether the address has
an account or not, a link that works once and logs in, limits per typed address and per client
address that say nothing about accounts either, and the mail settings read from the
environment. (The whole flow in a browser: tests/e2e/test_password_reset.py.)"""

from __future__ import annotations

import re
import socket

import pytest
from django.core import mail
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from notebook.mail import email_from_url, email_settings
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
OLD = "Sturdy-Tulip-4821"
NEW = "Brisk-Heron-7305"
RESET = "/accounts/password/reset/"
SENT = "/accounts/password/reset/sent/"
LINK = re.compile(r"https?://testserver(/accounts/password/reset/[^/\s]+/[^/\s]+/)")


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "reset_email": "2/h", "reset_address": "4/h"}
    yield
    caches["ratelimit"].clear()


@pytest.fixture
def dave(db):
    return UserFactory.create(username="dave", email="dave@example.org", password=OLD)


def ask(client: Client, email: str, **extra):
    return client.post(RESET, {"email": email}, **extra)


def link_in(message) -> str:
    match = LINK.search(message.body)
    assert match, message.body
    return match.group(1)


def without_csrf(page: bytes) -> str:
    """The page less its CSRF token (masked anew for every page)."""
    return re.sub(r'"X-CSRFToken": "[^"]+"', "", page.decode())


def can_log_in(username: str, password: str) -> bool:
    response = Client().post("/accounts/login/", {"username": username, "password": password})
    return response.status_code == 302


def test_the_login_page_links_to_the_reset_page(anon_client):
    login = anon_client.get("/accounts/login/").content.decode()
    assert f'<a href="{RESET}" data-testid="forgot-password">Forgot your password?</a>' in login
    page = anon_client.get(RESET)
    assert page.status_code == 200
    assert 'type="email" name="email"' in page.content.decode()


def test_a_mail_goes_to_the_account_and_its_link_sets_the_password_once(anon_client, dave):
    response = ask(anon_client, "DAVE@example.org")  # Django matches addresses case-blind
    assert (response.status_code, response["Location"]) == (302, SENT)
    (message,) = mail.outbox
    assert message.to == ["dave@example.org"]
    assert message.subject == "Set a new password for Notebook at testserver"
    assert 'account "dave"' in message.body
    link = link_in(message)

    form = anon_client.get(link, follow=True)  # Django moves the token into the session
    assert 'name="new_password1"' in form.content.decode()
    done = anon_client.post(
        form.redirect_chain[-1][0], {"new_password1": NEW, "new_password2": NEW}, follow=True
    )
    assert done.redirect_chain[-1][0] == "/accounts/password/reset/done/"
    assert "Your new password is set, and you are logged in." in done.content.decode()
    assert done.context["user"] == dave  # this browser is logged in
    assert anon_client.get("/").status_code == 200
    assert can_log_in("dave", NEW)
    assert not can_log_in("dave", OLD)

    again = Client().get(link, follow=True)  # one use: it signed the password it replaced
    assert again.status_code == 404
    page = again.content.decode()
    assert 'data-testid="reset-link-invalid"' in page
    assert 'name="new_password1"' not in page


def test_an_unknown_address_gets_the_same_answer_and_no_mail(anon_client, dave):
    known = ask(Client(), "dave@example.org", follow=True)
    mail.outbox.clear()
    unknown = ask(anon_client, "nobody@example.org", follow=True)
    assert unknown.redirect_chain == known.redirect_chain == [(SENT, 302)]
    assert unknown.status_code == known.status_code == 200
    assert without_csrf(unknown.content) == without_csrf(known.content)
    assert mail.outbox == []


def test_an_account_without_a_password_gets_no_mail(anon_client):
    # Made by single sign-on: it has no usable password to reset.
    UserFactory.create(username="erin", email="erin@example.org", password=None)
    response = ask(anon_client, "erin@example.org")
    assert (response.status_code, response["Location"]) == (302, SENT)
    assert mail.outbox == []


def test_a_mail_server_that_is_down_changes_nothing_on_the_page(anon_client, dave, settings):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    response = ask(anon_client, "dave@example.org")
    assert (response.status_code, response["Location"]) == (302, SENT)


def test_a_bad_address_is_refused_on_the_form(anon_client, dave):
    response = ask(anon_client, "not an address")
    assert response.status_code == 200
    assert "Enter a valid email address." in response.content.decode()
    assert mail.outbox == []


def test_requests_for_one_address_are_limited_whether_it_has_an_account_or_not(dave):
    for email in ("dave@example.org", "nobody@example.org"):
        answers = [ask(Client(), email, REMOTE_ADDR=f"192.0.2.{n}") for n in range(3)]
        assert [a.status_code for a in answers] == [302, 302, 429]
        refused = answers[-1]
        assert int(refused["Retry-After"]) > 0
        page = refused.content.decode()
        assert "Too many password-reset requests for this email address (at most 2 an hour)" in (
            page
        )
        assert f'href="{RESET}"' in page
    assert len(mail.outbox) == 2  # the refused request sent nothing


def test_requests_from_one_client_address_are_limited(dave):
    client = Client()
    answers = [ask(client, f"someone{n}@example.org") for n in range(4)]
    assert {a.status_code for a in answers} == {302}
    refused = ask(client, "dave@example.org")
    assert refused.status_code == 429
    assert "Too many password-reset requests from your address (at most 4 an hour)" in (
        refused.content.decode()
    )
    assert mail.outbox == []
    assert ask(Client(), "dave@example.org", REMOTE_ADDR="192.0.2.9").status_code == 302
    assert len(mail.outbox) == 1
    assert client.get(RESET).status_code == 200  # looking costs nothing


def test_with_single_sign_on_only_there_are_no_password_resets(anon_client, dave, settings):
    settings.OIDC_ISSUER = "https://login.example.org"
    settings.OIDC_SSO_ONLY = True
    for url in (RESET, SENT, "/accounts/password/reset/done/", "/accounts/password/reset/x/y/"):
        assert anon_client.get(url).status_code == 404, url
    assert ask(anon_client, "dave@example.org").status_code == 404
    assert mail.outbox == []
    assert "Forgot your password?" not in anon_client.get("/accounts/login/").content.decode()


# --- mail settings -----------------------------------------------------------------------------


def test_email_urls_name_the_backend_and_its_settings():
    assert email_from_url("smtp+tls://me%40example.org:p%3Ass@mail.example.org") == {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "mail.example.org",
        "EMAIL_PORT": 587,
        "EMAIL_HOST_USER": "me@example.org",
        "EMAIL_HOST_PASSWORD": "p:ss",
        "EMAIL_USE_TLS": True,
        "EMAIL_USE_SSL": False,
    }
    smtps = email_from_url("smtps://mail.example.org")
    assert (smtps["EMAIL_PORT"], smtps["EMAIL_USE_SSL"], smtps["EMAIL_USE_TLS"]) == (
        465,
        True,
        False,
    )
    plain = email_from_url("smtp://relay:2525")
    assert (plain["EMAIL_HOST"], plain["EMAIL_PORT"], plain["EMAIL_USE_TLS"]) == (
        "relay",
        2525,
        False,
    )
    assert email_from_url("smtp://relay?tls=1")["EMAIL_USE_TLS"] is True
    assert email_from_url("file:///var/mail/notebook") == {
        "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
        "EMAIL_FILE_PATH": "/var/mail/notebook",
    }
    assert email_from_url("console://")["EMAIL_BACKEND"].endswith("console.EmailBackend")
    for bad in (
        "http://mail.example.org",
        "smtp://",
        "file://",
        "smtp://h:port",
        "smtps://h?tls=1",
    ):
        with pytest.raises(ImproperlyConfigured):
            email_from_url(bad)


def test_mail_settings_come_from_email_url_or_email_host_else_the_console(monkeypatch):
    for name in ("EMAIL_URL", "EMAIL_HOST", "EMAIL_PORT", "EMAIL_USE_TLS", "EMAIL_USE_SSL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("DEFAULT_FROM_EMAIL", raising=False)
    default = email_settings()
    assert default["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"
    assert default["DEFAULT_FROM_EMAIL"] == "notebook@localhost"
    monkeypatch.setenv("EMAIL_HOST", "mail.example.org")
    monkeypatch.setenv("EMAIL_USE_TLS", "true")
    monkeypatch.setenv("EMAIL_HOST_USER", "notebook")
    monkeypatch.setenv("DEFAULT_FROM_EMAIL", "Notebook <notebook@example.org>")
    host = email_settings()
    assert (host["EMAIL_HOST"], host["EMAIL_PORT"], host["EMAIL_USE_TLS"]) == (
        "mail.example.org",
        587,
        True,
    )
    assert host["EMAIL_HOST_USER"] == "notebook"
    assert host["DEFAULT_FROM_EMAIL"] == "Notebook <notebook@example.org>"
    monkeypatch.setenv("EMAIL_URL", "smtps://relay.example.org")  # the URL wins
    assert email_settings()["EMAIL_HOST"] == "relay.example.org"
    monkeypatch.delenv("EMAIL_URL")
    monkeypatch.setenv("EMAIL_USE_SSL", "1")
    with pytest.raises(ImproperlyConfigured, match="cannot both be on"):
        email_settings()
