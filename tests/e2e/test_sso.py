"""Single sign-on in Chromium against a real OpenID Connect provider: django-oauth-toolkit in a
tiny Django project of its own (tests/oidc_provider), run by `manage.py runserver` in a child
process on a free port with its own sqlite database in a temporary directory and an RSA key
made here, standing in for a remote identity provider. Notebook's live server is pointed at it
(OIDC_ISSUER, endpoints discovered); the browser clicks "Sign in with Example ID", signs in at
the provider, consents, and lands on its notebooks as a new account; signing in again lands on
the same account. Screenshots of the login page with single sign-on at 1366 and 390 px
(test-artifacts/screenshots/sso-*.png)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from accounts import sso
from accounts.models import OidcIdentity
from tests.e2e.conftest import SCREENSHOTS
from tests.e2e.helpers import path_is

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "notebook-browser-test"
CLIENT_SECRET = "browser-test-secret"
USERNAME, PASSWORD, EMAIL = "ann.smith", "Provider-Pass-7305", "ann.smith@example.org"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def provider(live_server: Any, tmp_path: Path) -> Iterator[str]:
    """The provider's issuer URL, once it answers its discovery document."""
    port = _free_port()
    issuer = f"http://127.0.0.1:{port}/o"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.oidc_provider.settings",
        "OIDC_PROVIDER_DIR": str(tmp_path),
        "OIDC_PROVIDER_ISSUER": issuer,
        "OIDC_PROVIDER_RSA_KEY": pem,
    }
    callback = f"{live_server.url}/accounts/sso/callback/"
    subprocess.run(
        [sys.executable, "-m", "tests.oidc_provider.setup", callback, CLIENT_ID, CLIENT_SECRET,
         USERNAME, PASSWORD, EMAIL],
        env=env, cwd=ROOT, check=True, timeout=120,
    )  # fmt: skip
    log = (tmp_path / "provider.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{port}", "--noreload"],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                found = requests.get(f"{issuer}/.well-known/openid-configuration", timeout=2)
                if found.ok:
                    break
            except requests.ConnectionError:
                pass
            assert server.poll() is None, (tmp_path / "provider.log").read_text()
            assert time.monotonic() < deadline, "the provider did not start"
            time.sleep(0.1)
        yield issuer
    finally:
        server.terminate()
        server.wait(10)
        log.close()


@pytest.fixture
def sso_on(provider: str, settings: Any) -> Iterator[str]:
    sso.discovery_forget()
    settings.OIDC_ISSUER = provider
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_BUTTON_LABEL = "Example ID"
    yield provider
    sso.discovery_forget()


def shoot_login(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for width, height in ((1366, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            page.screenshot(path=SCREENSHOTS / f"{name}-{width}-{scheme}.png", full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), width
    page.set_viewport_size({"width": 1280, "height": 900})
    page.emulate_media(color_scheme="light")


def sign_in_with_the_provider(page: Page, provider: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_role("link", name="Sign in with Example ID").click()
    provider_login = page.get_by_role("button", name="Sign in to Example ID")
    consent = page.get_by_role("button", name="Authorize")
    landed = page.get_by_role("heading", name="Your notebooks")
    expect(provider_login.or_(consent).or_(landed)).to_be_visible()
    if provider_login.is_visible():
        assert page.url.startswith(provider.removesuffix("/o") + "/accounts/login/"), page.url
        page.get_by_label("Username").fill(USERNAME)
        page.get_by_label("Password").fill(PASSWORD)
        provider_login.click()
        expect(consent.or_(landed)).to_be_visible()
    if consent.is_visible():
        consent.click()
    expect(page).to_have_url(path_is("/"))
    expect(landed).to_be_visible()


def test_sign_in_with_a_real_provider_makes_the_account_once(page: Page, sso_on: str, settings):
    page.goto("/accounts/login/")
    expect(page.get_by_role("link", name="Sign in with Example ID")).to_be_visible()
    shoot_login(page, "sso-login")
    settings.OIDC_SSO_ONLY = True
    page.reload()
    expect(page.get_by_label("Password")).to_have_count(0)
    shoot_login(page, "sso-only-login")
    settings.OIDC_SSO_ONLY = False

    sign_in_with_the_provider(page, sso_on)
    expect(page.get_by_role("button", name="Log out")).to_contain_text("ann.smith")
    ann = User.objects.get()
    assert (ann.username, ann.email, ann.has_usable_password()) == (USERNAME, EMAIL, False)
    identity = OidcIdentity.objects.get()
    assert (identity.user, identity.issuer) == (ann, sso_on)

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(path_is("/accounts/login/"))
    sign_in_with_the_provider(page, sso_on)  # the provider remembers the browser
    expect(page.get_by_role("button", name="Log out")).to_contain_text("ann.smith")
    assert list(User.objects.values_list("pk", flat=True)) == [ann.pk]
    assert OidcIdentity.objects.get().pk == identity.pk
