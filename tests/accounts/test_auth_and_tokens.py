from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import ApiToken, hash_token
from accounts.services import api_token_create, api_token_revoke
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
PASSWORD = "Sturdy-Tulip-4821"


def test_signup_logs_in_and_lands_on_notebooks(anon_client):
    response = anon_client.post(
        "/accounts/signup/",
        {"username": "carol", "password1": PASSWORD, "password2": PASSWORD},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == "/"
    assert response.context["user"].username == "carol"
    assert "No notebooks yet." in response.content.decode()


def test_signup_rejects_weak_or_mismatched_passwords(anon_client):
    response = anon_client.post(
        "/accounts/signup/", {"username": "carol", "password1": "123", "password2": "1234"}
    )
    assert response.status_code == 200
    assert not User.objects.filter(username="carol").exists()


def test_login_and_logout(anon_client):
    UserFactory.create(username="dave", password=PASSWORD)
    response = anon_client.post(
        "/accounts/login/", {"username": "dave", "password": PASSWORD}, follow=True
    )
    assert response.context["user"].is_authenticated
    anon_client.post("/accounts/logout/")
    assert anon_client.get("/").status_code == 302


def test_wrong_password_says_so(anon_client):
    UserFactory.create(username="dave", password=PASSWORD)
    response = anon_client.post("/accounts/login/", {"username": "dave", "password": "nope"})
    assert "do not match" in response.content.decode()


def test_login_page_is_public_and_rest_is_not(anon_client):
    assert anon_client.get("/accounts/login/").status_code == 200
    assert anon_client.get("/accounts/signup/").status_code == 200
    assert anon_client.get("/settings/").status_code == 302


def test_token_is_stored_hashed_and_shown_once(alice_client, alice):
    response = alice_client.post("/settings/", {"name": "backup script"})
    raw = response.context["new_token"]
    assert raw.startswith("nbk_")
    token = ApiToken.objects.get(user=alice)
    assert token.token_hash == hash_token(raw)
    assert raw not in {token.token_hash, token.prefix, token.name}
    assert raw not in alice_client.get("/settings/").content.decode()


def test_token_authenticates_and_revocation_takes_effect_at_once(alice):
    token, raw = api_token_create(user=alice, name="script")
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    assert client.get("/api/me").json()["username"] == "alice"
    token.refresh_from_db()
    assert token.last_used_at is not None
    api_token_revoke(token=token)
    assert client.get("/api/me").status_code == 401


def test_revoke_from_the_settings_page(alice_client, alice):
    token, raw = api_token_create(user=alice, name="script")
    alice_client.post(f"/settings/tokens/{token.pk}/revoke/")
    token.refresh_from_db()
    assert not token.is_active
    assert Client(headers={"Authorization": f"Bearer {raw}"}).get("/api/me").status_code == 401


def test_inactive_users_tokens_stop_working(alice):
    _, raw = api_token_create(user=alice, name="script")
    User.objects.filter(pk=alice.pk).update(is_active=False)
    assert Client(headers={"Authorization": f"Bearer {raw}"}).get("/api/me").status_code == 401


def test_token_name_is_required(alice_client):
    response = alice_client.post("/settings/", {"name": "   "})
    assert response.status_code == 200
    assert not ApiToken.objects.exists()
