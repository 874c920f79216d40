"""Single sign-on with OpenID Connect: what it takes from a provider (tests/fake_oidc.py, a local
server speaking the protocol) and what it refuses. Accounts are made on the first login and
found again by issuer and subject only, never by email; unverified addresses and other domains
are refused with a page that says so; tokens for another client or from another issuer, a
userinfo about someone else, forged or replayed callbacks and an unreachable provider end on a
page, never a 500 or a login. OIDC_SSO_ONLY turns password login, sign-up and resets off.
(The whole flow against a real provider in a browser: tests/e2e/test_sso.py.)"""

from __future__ import annotations

import subprocess
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts import sso
from accounts.models import OidcIdentity
from accounts.services import sso_username
from tests.factories import UserFactory
from tests.fake_oidc import CLIENT_ID, CLIENT_SECRET, FakeProvider, fake_oidc_provider
from tests.fixtures.processes import _run_settings

pytestmark = pytest.mark.django_db
PASSWORD = "Sturdy-Tulip-4821"
ANN = {"sub": "ann-0001", "email": "ann@example.org", "email_verified": True,
       "preferred_username": "ann"}  # fmt: skip


@pytest.fixture
def provider(settings) -> Any:
    sso.discovery_forget()
    with fake_oidc_provider() as fake:
        settings.OIDC_ISSUER = fake.issuer
        settings.OIDC_RP_CLIENT_ID = CLIENT_ID
        settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
        yield fake
    sso.discovery_forget()


def sso_login(client: Client, provider: FakeProvider, claims: dict[str, Any], *, next_url: str = "",
              **scripted: dict[str, Any]) -> Any:  # fmt: skip
    """Start at our site, "log in" at the provider, come back with its code."""
    start = client.get("/accounts/sso/start/", {"next": next_url} if next_url else {})
    assert start.status_code == 302, start.content
    location = urlsplit(start["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{provider.issuer}/authorize"
    params = parse_qs(location.query)
    code = provider.authorize(params, claims, **scripted)
    return client.get("/accounts/sso/callback/", {"code": code, "state": params["state"][0]})


def logged_in_as(client: Client) -> User | None:
    response = client.get("/settings/")
    return response.context["user"] if response.status_code == 200 else None


def refused(response: Any, message: str, status: int = 403) -> bool:
    page = response.content.decode()
    assert response.status_code == status, page
    assert 'data-testid="sso-refused"' in page
    assert message in page, page
    return True


# --- off unless configured ---------------------------------------------------------------------


def test_without_an_issuer_there_is_no_button_and_the_routes_are_404(anon_client, settings):
    settings.OIDC_ISSUER = ""
    page = anon_client.get("/accounts/login/").content.decode()
    assert "Sign in with" not in page
    assert 'name="password"' in page
    assert anon_client.get("/accounts/sso/start/").status_code == 404
    assert (
        anon_client.get("/accounts/sso/callback/", {"code": "x", "state": "y"}).status_code == 404
    )


def test_the_login_page_offers_the_provider_beside_the_password(anon_client, provider, settings):
    page = anon_client.get("/accounts/login/", {"next": "/search/"}).content.decode()
    assert 'href="/accounts/sso/start/?next=/search/">Sign in with 127.0.0.1</a>' in page
    assert 'name="password"' in page
    assert "Forgot your password?" in page
    settings.OIDC_BUTTON_LABEL = "Example <SSO>"
    page = anon_client.get("/accounts/login/").content.decode()
    assert "Sign in with Example &lt;SSO&gt;</a>" in page


# --- accounts: made once, found by subject -----------------------------------------------------


def test_a_first_login_makes_an_account_that_later_logins_find_by_subject(anon_client, provider):
    response = sso_login(anon_client, provider, ANN)
    assert (response.status_code, response["Location"]) == (302, "/")
    ann = User.objects.get(username="ann")
    assert (ann.email, ann.has_usable_password()) == ("ann@example.org", False)
    assert logged_in_as(anon_client) == ann
    identity = OidcIdentity.objects.get()
    assert (identity.user, identity.issuer, identity.subject) == (ann, provider.issuer, "ann-0001")

    # Later: another name and address at the provider, the same subject, the same account.
    again = Client()
    later = {**ANN, "email": "ann.smith@example.org", "preferred_username": "asmith"}
    assert sso_login(again, provider, later).status_code == 302
    assert logged_in_as(again) == ann
    assert User.objects.count() == 1
    ann.refresh_from_db()
    assert (ann.username, ann.email) == ("ann", "ann.smith@example.org")


def test_an_account_with_the_same_email_is_never_taken_over(anon_client, provider):
    carol = UserFactory.create(username="carol", email="carol@example.org", password=PASSWORD)
    claims = {"sub": "mallory", "email": "carol@example.org", "email_verified": True,
              "preferred_username": "carol"}  # fmt: skip
    assert sso_login(anon_client, provider, claims).status_code == 302
    newcomer = logged_in_as(anon_client)
    assert newcomer is not None
    assert newcomer != carol
    assert newcomer.username == "carol-2"
    assert not OidcIdentity.objects.filter(user=carol).exists()
    carol.refresh_from_db()
    assert carol.check_password(PASSWORD)


def test_usernames_come_from_the_provider_made_valid_and_unique(db):
    UserFactory.create(username="ann")
    UserFactory.create(username="Ann-2")
    assert sso_username(preferred_username="ann", email="") == "ann-3"  # case-blind
    assert sso_username(preferred_username="", email="bob.jones@example.org") == "bob.jones"
    assert sso_username(preferred_username="Zoë Smith (HR)", email="") == "Zoë-Smith-HR"
    assert sso_username(preferred_username="!!!", email="") == "user"
    assert len(sso_username(preferred_username="x" * 400, email="")) <= 150


def test_after_the_login_the_browser_goes_where_it_was_going_on_this_site(anon_client, provider):
    assert sso_login(anon_client, provider, ANN, next_url="/search/")["Location"] == "/search/"
    elsewhere = sso_login(Client(), provider, ANN, next_url="https://evil.example/")
    assert elsewhere["Location"] == "/"


# --- refusals ----------------------------------------------------------------------------------


def test_an_unverified_email_is_refused_and_makes_no_account(anon_client, provider):
    response = sso_login(anon_client, provider, {**ANN, "email_verified": False})
    assert refused(response, "says your email address ann@example.org is not verified")
    response = sso_login(Client(), provider, {**ANN, "email_verified": "false"})
    assert refused(response, "is not verified")
    assert not User.objects.exists()
    assert logged_in_as(anon_client) is None
    # No email_verified claim at all: the provider vouches for nothing either way.
    unstated = {k: v for k, v in ANN.items() if k != "email_verified"}
    assert sso_login(anon_client, provider, unstated).status_code == 302


def test_only_the_allowed_email_domains_sign_in(anon_client, provider, settings):
    settings.OIDC_ALLOWED_EMAIL_DOMAINS = ["example.org", "example.com"]
    other = {**ANN, "sub": "x", "email": "ann@elsewhere.net"}
    assert refused(
        sso_login(anon_client, provider, other),
        "Only accounts with an email address at example.org, example.com may sign in",
    )
    none = {"sub": "y", "preferred_username": "nomail"}
    assert refused(sso_login(anon_client, provider, none), "gave no email address")
    # A look-alike is not the domain.
    assert refused(sso_login(anon_client, provider, {**other, "email": "a@evil-example.org"}), "")
    assert not User.objects.exists()
    assert sso_login(anon_client, provider, {**ANN, "email": "Ann@EXAMPLE.org"}).status_code == 302
    # Checked at every login: an account whose address left the domains is refused.
    assert refused(sso_login(Client(), provider, {**ANN, "email": "ann@elsewhere.net"}), "")
    assert User.objects.count() == 1


@pytest.mark.parametrize(
    "scripted",
    [
        {"id_token": {"aud": "another-client"}},
        {"id_token": {"aud": [CLIENT_ID, "another-client"]}},  # several, and no azp for us
        {"id_token": {"iss": "https://login.evil.example"}},
        {"id_token": {"nonce": "replayed"}},
        {"id_token": {"exp": 1}},
        {"userinfo": {"sub": "someone-else"}},
    ],
    ids=["audience", "audiences", "issuer", "nonce", "expired", "userinfo-subject"],
)
def test_tokens_not_meant_for_us_log_nobody_in(anon_client, provider, scripted):
    response = sso_login(anon_client, provider, ANN, **scripted)
    assert refused(response, "did not complete")
    assert not User.objects.exists()
    assert logged_in_as(anon_client) is None


def test_a_forged_replayed_or_cancelled_callback_logs_nobody_in(anon_client, provider):
    forged = anon_client.get("/accounts/sso/callback/", {"code": "x", "state": "guessed"})
    assert refused(forged, "did not complete")
    start = anon_client.get("/accounts/sso/start/")
    params = parse_qs(urlsplit(start["Location"]).query)
    state = params["state"][0]
    cancelled = anon_client.get(
        "/accounts/sso/callback/", {"error": "access_denied", "state": state}
    )
    assert refused(cancelled, "did not complete")
    code = provider.authorize(params, ANN)
    replay = anon_client.get("/accounts/sso/callback/", {"code": code, "state": state})
    assert refused(replay, "did not complete")  # the state was spent by the cancellation
    assert not User.objects.exists()


def test_an_unreachable_provider_is_a_page_not_an_error(anon_client, provider):
    provider.down = True
    response = anon_client.get("/accounts/sso/start/")
    assert refused(response, "127.0.0.1 cannot be reached just now", status=503)
    assert anon_client.get("/accounts/login/").status_code == 200  # the page itself never asks


def test_a_deactivated_account_cannot_sign_in_and_its_session_ends(anon_client, provider):
    assert sso_login(anon_client, provider, ANN).status_code == 302
    User.objects.filter(username="ann").update(is_active=False)
    assert logged_in_as(anon_client) is None
    assert refused(sso_login(Client(), provider, ANN), "did not complete")


def test_a_password_login_never_reaches_the_provider(anon_client, provider):
    UserFactory.create(username="dave", password=PASSWORD)
    response = anon_client.post(
        "/accounts/login/?code=abc&state=def", {"username": "dave", "password": "wrong"}
    )
    assert "do not match" in response.content.decode()
    assert provider.requests == []
    ok = anon_client.post("/accounts/login/", {"username": "dave", "password": PASSWORD})
    assert ok.status_code == 302
    assert provider.requests == []


# --- single sign-on only -----------------------------------------------------------------------


def test_with_sso_only_passwords_and_signup_are_off(anon_client, provider, settings):
    settings.OIDC_SSO_ONLY = True
    dave = UserFactory.create(username="dave", password=PASSWORD)
    page = anon_client.get("/accounts/login/").content.decode()
    assert "Sign in with 127.0.0.1" in page
    assert 'name="password"' not in page
    assert "Forgot your password?" not in page
    assert 'href="/accounts/signup/"' not in page
    assert "Signing in with 127.0.0.1 makes one." in page

    refused_login = anon_client.post("/accounts/login/", {"username": "dave", "password": PASSWORD})
    assert refused_login.status_code == 403
    assert "Password login is turned off here." in refused_login.content.decode()
    assert logged_in_as(anon_client) is None

    for response in (
        anon_client.get("/accounts/signup/"),
        anon_client.post(
            "/accounts/signup/", {"username": "eve", "password1": PASSWORD, "password2": PASSWORD}
        ),
    ):
        assert response.status_code == 403
        assert "signs people in with single sign-on only" in response.content.decode()
    assert not User.objects.filter(username="eve").exists()

    assert sso_login(anon_client, provider, ANN).status_code == 302
    # An administrator made with `manage.py createsuperuser` still logs in to the admin.
    dave.is_staff = dave.is_superuser = True
    dave.save()
    admin = Client().post("/admin/login/?next=/admin/", {"username": "dave", "password": PASSWORD})
    assert (admin.status_code, admin["Location"]) == (302, "/admin/")


@pytest.mark.slow
def test_single_sign_on_settings_are_read_and_checked(tmp_path):
    env = {"DATA_DIR": str(tmp_path), "DATABASE_URL": "postgresql://x@localhost/x"}
    sso_env = {
        **env,
        "OIDC_ISSUER": "https://login.example.org/",
        "OIDC_CLIENT_ID": "nb",
        "OIDC_CLIENT_SECRET": "s",
        "OIDC_ALLOWED_EMAIL_DOMAINS": "Example.org, @corp.example",
    }
    code = (
        "print(settings.OIDC_ISSUER, settings.OIDC_ALLOWED_EMAIL_DOMAINS, settings.OIDC_SSO_ONLY)"
    )
    assert _run_settings(sso_env, code) == (
        "https://login.example.org ['example.org', 'corp.example'] False"
    )
    for bad, message in (
        ({**sso_env, "OIDC_ISSUER": "http://login.example.org"}, "must be an https:// URL"),
        ({**sso_env, "OIDC_CLIENT_SECRET": ""}, "needs OIDC_ISSUER, OIDC_CLIENT_ID and"),
        ({**env, "OIDC_SSO_ONLY": "true"}, "needs OIDC_ISSUER, OIDC_CLIENT_ID and"),
    ):
        with pytest.raises(subprocess.CalledProcessError) as failed:
            _run_settings(bad, "print(settings.OIDC_ISSUER)")
        assert message in failed.value.stderr
