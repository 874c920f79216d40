"""Sign-up as SIGNUP says (open, by invitation, closed), one-use invitations (only their SHA-256
stored, claimed in the same transaction as the account), and the settings page that shows a new
API token never being cached. (The per-address sign-up limit is in tests/test_ratelimits.py.)"""

from __future__ import annotations

import subprocess
import threading
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.core.cache import caches
from django.db import connection
from django.test import Client
from django.utils import timezone

from accounts.forms import SignupForm
from accounts.models import Invitation, hash_token
from accounts.services import invitation_create
from tests.factories import UserFactory
from tests.fixtures.processes import _run_settings

pytestmark = pytest.mark.django_db
PASSWORD = "Sturdy-Tulip-4821"
BY_INVITATION = "Sign-up is by invitation. Ask an administrator of this Notebook for an invitation"
CLOSED = "Sign-up is closed. Ask an administrator of this Notebook to create an account for you."
UNUSABLE = "This invitation link cannot be used: it has been used already, has expired, or is"
SIGNUP_FORM = '<form method="post" action="/accounts/signup/">'


def sign_up(client: Client, username: str, invite: str | None = None, **extra):
    data = {"username": username, "password1": PASSWORD, "password2": PASSWORD}
    if invite is not None:
        data["invite"] = invite
    return client.post("/accounts/signup/", data, **extra)


def signed_up(response) -> bool:
    return bool(response.status_code == 302 and response["Location"] == "/")


def assert_refused(response, message: str) -> None:
    assert response.status_code == 403
    page = response.content.decode()
    assert message in page
    assert SIGNUP_FORM not in page
    assert 'name="password1"' not in page


@pytest.fixture
def invite_only(settings):
    settings.SIGNUP = "invite"


@pytest.fixture
def invitation(invite_only) -> str:
    _, raw = invitation_create(created_by=None, note="carol@example.org")
    return raw


# --- open (the default) ------------------------------------------------------------------------


def test_open_signup_shows_the_form_and_the_login_page_offers_it(anon_client):
    page = anon_client.get("/accounts/signup/")
    assert page.status_code == 200
    assert SIGNUP_FORM in page.content.decode()
    assert 'name="invite"' not in page.content.decode()
    login = anon_client.get("/accounts/login/").content.decode()
    assert 'No account yet? <a href="/accounts/signup/">Sign up</a>' in login
    assert signed_up(sign_up(anon_client, "carol"))


def test_open_signup_neither_needs_nor_uses_an_invitation(anon_client, invitation, settings):
    settings.SIGNUP = "open"
    assert signed_up(sign_up(anon_client, "carol", invite=invitation))
    assert Invitation.objects.get().used_at is None


# --- closed ------------------------------------------------------------------------------------


def test_closed_signup_shows_why_without_a_form_and_creates_nobody(anon_client, settings):
    settings.SIGNUP = "closed"
    assert_refused(anon_client.get("/accounts/signup/"), CLOSED)
    assert_refused(sign_up(anon_client, "carol"), CLOSED)
    _, raw = invitation_create(created_by=None)
    assert_refused(sign_up(anon_client, "carol", invite=raw), CLOSED)
    assert not User.objects.filter(username="carol").exists()
    login = anon_client.get("/accounts/login/").content.decode()
    assert 'href="/accounts/signup/"' not in login
    assert "Sign up" not in login
    assert "Ask an administrator to create one for you." in login


# --- by invitation -----------------------------------------------------------------------------


def test_invite_only_signup_without_an_invitation_says_how_to_get_one(anon_client, invite_only):
    assert_refused(anon_client.get("/accounts/signup/"), BY_INVITATION)
    assert_refused(sign_up(anon_client, "carol"), BY_INVITATION)
    assert_refused(anon_client.get("/accounts/signup/?invite=made-up"), UNUSABLE)
    assert_refused(sign_up(anon_client, "carol", invite="made-up"), UNUSABLE)
    assert not User.objects.filter(username="carol").exists()
    login = anon_client.get("/accounts/login/").content.decode()
    assert 'href="/accounts/signup/"' not in login
    assert "Ask an administrator for an invitation link." in login


def test_an_invitation_creates_one_account_and_is_then_used_up(anon_client, invitation):
    page = anon_client.get(f"/accounts/signup/?{urlencode({'invite': invitation})}")
    assert page.status_code == 200
    assert SIGNUP_FORM in page.content.decode()  # posted without the token in the URL ...
    assert f'<input type="hidden" name="invite" value="{invitation}">' in page.content.decode()
    assert signed_up(sign_up(anon_client, "carol", invite=invitation))  # ... but in the form
    carol = User.objects.get(username="carol")
    used = Invitation.objects.get()
    assert used.used_by == carol
    assert used.used_at is not None
    assert anon_client.session["_auth_user_id"] == str(carol.pk)

    again = Client()
    assert_refused(again.get(f"/accounts/signup/?invite={invitation}"), UNUSABLE)
    assert_refused(sign_up(again, "mallory", invite=invitation), UNUSABLE)
    assert not User.objects.filter(username="mallory").exists()


def test_an_expired_invitation_is_refused(anon_client, invitation):
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert_refused(anon_client.get(f"/accounts/signup/?invite={invitation}"), UNUSABLE)
    assert_refused(sign_up(anon_client, "carol", invite=invitation), UNUSABLE)
    assert not User.objects.filter(username="carol").exists()
    assert Invitation.objects.get().used_at is None


def test_a_rejected_form_keeps_the_invitation_and_leaves_it_unused(anon_client, invitation):
    weak = {"username": "carol", "password1": "123", "password2": "123", "invite": invitation}
    response = anon_client.post("/accounts/signup/", weak)
    assert response.status_code == 200
    assert f'name="invite" value="{invitation}"' in response.content.decode()
    assert Invitation.objects.get().used_at is None
    assert signed_up(sign_up(anon_client, "carol", invite=invitation))


def test_invitations_are_stored_hashed_and_last_a_week(invite_only):
    invitation, raw = invitation_create(created_by=None, note="  carol   at work ")
    assert invitation.token_hash == hash_token(raw)
    assert raw not in {invitation.token_hash, invitation.note}
    assert invitation.note == "carol at work"
    assert not raw.startswith("nbk_")  # not mistaken for an API token
    left = invitation.expires_at - timezone.now()
    assert timedelta(days=7) - timedelta(minutes=1) < left <= timedelta(days=7)


@pytest.mark.django_db(transaction=True)
def test_one_invitation_used_twice_at_once_creates_one_account(invite_only, monkeypatch):
    _, raw = invitation_create(created_by=None)
    # Both sign-ups get past every check (the invitation is unused when each looks) before
    # either claims it.
    both_checked = threading.Barrier(2, timeout=10)
    full_clean = SignupForm.full_clean

    def full_clean_then_wait(form: SignupForm) -> None:
        full_clean(form)
        both_checked.wait()

    monkeypatch.setattr(SignupForm, "full_clean", full_clean_then_wait)
    codes: dict[str, int] = {}

    def sign_up_as(username: str) -> None:
        try:
            codes[username] = sign_up(Client(), username, invite=raw).status_code
        finally:
            connection.close()

    threads = [threading.Thread(target=sign_up_as, args=(name,)) for name in ("carol", "dan")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    caches["ratelimit"].clear()  # committed, unlike other tests' sign-up counts
    assert sorted(codes.values()) == [302, 403]
    winner = next(name for name, code in codes.items() if code == 302)
    assert list(User.objects.values_list("username", flat=True)) == [winner]
    assert Invitation.objects.get().used_by == User.objects.get()


# --- the admin ---------------------------------------------------------------------------------


def test_an_administrator_creates_an_invitation_and_sees_its_link_once(invite_only):
    root = UserFactory.create(username="root", is_staff=True, is_superuser=True)
    admin = Client()
    admin.force_login(root)
    assert admin.get("/admin/accounts/invitation/add/").status_code == 200
    expires = timezone.localtime() + timedelta(days=2)
    response = admin.post(
        "/admin/accounts/invitation/add/",
        {
            "note": "carol@example.org",
            "expires_at_0": expires.strftime("%Y-%m-%d"),
            "expires_at_1": expires.strftime("%H:%M:%S"),
        },
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "not shown again" in page
    link = response.context["link"]
    assert link.startswith("http://testserver/accounts/signup/?invite=")
    assert f'<code data-testid="invitation-link">{link}</code>' in page
    invitation = Invitation.objects.get()
    raw = link.split("invite=", 1)[1]
    assert invitation.token_hash == hash_token(raw)
    assert (invitation.created_by, invitation.note) == (root, "carol@example.org")
    assert abs(invitation.expires_at - expires) < timedelta(seconds=1)
    listing = admin.get("/admin/accounts/invitation/").content.decode()
    assert "carol@example.org" in listing
    assert raw not in listing
    assert (
        raw not in admin.get(f"/admin/accounts/invitation/{invitation.pk}/change/").content.decode()
    )

    assert signed_up(sign_up(Client(), "carol", invite=raw))
    # An unused invitation can be expired from the list.
    _, other = invitation_create(created_by=root)
    admin.post(
        "/admin/accounts/invitation/",
        {
            "action": "expire",
            "_selected_action": list(Invitation.objects.values_list("pk", flat=True)),
        },
    )
    assert_refused(sign_up(Client(), "dan", invite=other), UNUSABLE)
    assert Invitation.objects.get(used_by__username="carol").used_at is not None


# --- settings ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_signup_is_read_from_the_environment_and_checked(tmp_path):
    env = {"DATA_DIR": str(tmp_path), "DATABASE_URL": "postgresql://x@localhost/x"}
    assert _run_settings(env, "print(settings.SIGNUP)") == "open"
    assert _run_settings({**env, "SIGNUP": " Invite "}, "print(settings.SIGNUP)") == "invite"
    with pytest.raises(subprocess.CalledProcessError) as refused:
        _run_settings({**env, "SIGNUP": "sometimes"}, "print(settings.SIGNUP)")
    assert (
        "ImproperlyConfigured: SIGNUP must be one of open, invite, closed" in refused.value.stderr
    )


# --- the settings page -------------------------------------------------------------------------


def test_the_settings_page_is_never_cached(alice_client):
    for response in (
        alice_client.get("/settings/"),
        alice_client.post("/settings/", {"name": "backup script"}),
        alice_client.post("/settings/", {"name": "cron"}, headers={"HX-Request": "true"}),
    ):
        assert response.status_code == 200
        cache_control = {part.strip() for part in response["Cache-Control"].split(",")}
        assert {"no-store", "private"} <= cache_control
