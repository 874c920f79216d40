"""Single sign-on with OpenID Connect, on mozilla-django-oidc: the provider's endpoints from its
discovery document (fetched when a login first needs them, kept an hour), the rules a login
must pass (email domain, verified email), the account found by issuer and subject only, and
the two views of the code flow (state, nonce and PKCE are the library's).

The library does the protocol: the authorization request (state, nonce, S256 PKCE kept in
the session), the callback's state check, the code exchange, the ID token's signature (from
the provider's JWKS) and nonce, the userinfo request. On top of it this module checks the ID
token's issuer and audience, which the library does not, and that userinfo speaks of the
same subject as the ID token.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from accounts import services

if TYPE_CHECKING:
    from core.types import User

logger = logging.getLogger(__name__)

DISCOVERY_SECONDS = 3600  # endpoints rarely move; the keys are fetched at every login anyway
_discovered: dict[str, tuple[float, dict[str, Any]]] = {}
_discovery_lock = threading.Lock()
# The library's settings that name an endpoint, and the discovery document's keys for them.
_ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be had, or does not describe it."""


class SsoRefused(Exception):
    """The provider vouched for someone this Notebook does not let in; `message` says why."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


# What can go wrong between the callback and the account: the provider (network, HTTP error,
# bad JSON), its tokens (signature, expiry, nonce, issuer, audience), a forged callback.
FLOW_FAILURES = (
    requests.RequestException,
    ValueError,
    KeyError,
    jwt.PyJWTError,
    SuspiciousOperation,
)


def sso_enabled() -> bool:
    return bool(settings.OIDC_ISSUER)


def sso_label() -> str:
    """What the button names: OIDC_BUTTON_LABEL, else the provider's host name."""
    return settings.OIDC_BUTTON_LABEL or urlsplit(settings.OIDC_ISSUER).hostname or ""


def _same_issuer(a: object, b: str) -> bool:
    return isinstance(a, str) and a.rstrip("/") == b.rstrip("/")


def provider_configuration() -> dict[str, Any]:
    """OIDC_ISSUER's discovery document (`<issuer>/.well-known/openid-configuration`), fetched
    once an hour per process; a failed fetch is not kept, so the next login tries again.
    Raises ProviderUnavailable when it cannot be fetched, names another issuer, or lacks an
    endpoint the code flow needs."""
    issuer = settings.OIDC_ISSUER
    with _discovery_lock:
        cached = _discovered.get(issuer)
        if cached is not None and time.monotonic() - cached[0] < DISCOVERY_SECONDS:
            return cached[1]
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"{url}: {exc}") from exc
    if not isinstance(document, dict) or not _same_issuer(document.get("issuer"), issuer):
        raise ProviderUnavailable(f"{url} describes another issuer")
    missing = [key for key in _ENDPOINTS.values() if not isinstance(document.get(key), str)]
    if missing:
        raise ProviderUnavailable(f"{url} has no {', '.join(missing)}")
    with _discovery_lock:
        _discovered[issuer] = (time.monotonic(), document)
    return document


def discovery_forget() -> None:
    """Drop the kept discovery documents (tests; a provider that moved its endpoints)."""
    with _discovery_lock:
        _discovered.clear()


def _oidc_setting(attr: str, *default: Any) -> Any:
    """The library's settings, its endpoints taken from the discovery document."""
    if attr in _ENDPOINTS:
        return provider_configuration()[_ENDPOINTS[attr]]
    return import_from_settings(attr, *default)


def claims_check(claims: dict[str, Any]) -> None:
    """Raise SsoRefused unless these claims may sign in: an email address the provider says
    is unverified (email_verified present and false) never does; with
    OIDC_ALLOWED_EMAIL_DOMAINS, only an address at one of them does. Checked at every login,
    not only the first."""
    email = claims.get("email") or ""
    if not isinstance(email, str):
        email = ""
    verified = claims.get("email_verified")
    if email and (verified is False or str(verified).lower() == "false"):
        raise SsoRefused(
            gettext(
                "%(provider)s says your email address %(email)s is not verified. Verify it "
                "there, then sign in again."
            )
            % {"provider": sso_label(), "email": email}
        )
    domains = settings.OIDC_ALLOWED_EMAIL_DOMAINS
    if domains and email.rpartition("@")[2].lower() not in domains:
        raise SsoRefused(
            gettext(
                "Only accounts with an email address at %(domains)s may sign in to this "
                "Notebook, and %(provider)s gave %(email)s. Ask an administrator if this is "
                "wrong."
            )
            % {
                "domains": ", ".join(domains),
                "provider": sso_label(),
                "email": email or gettext("no email address"),
            }
        )


class OidcBackend(OIDCAuthenticationBackend):  # type: ignore[misc]  # the library is untyped
    """mozilla-django-oidc's backend, with the endpoints discovered when a login needs them
    (never when a signed-in user's session is read), our rules (claims_check), and the account
    found by (issuer, subject) alone: no account is ever matched by its email address. Acts
    only on the callback (which passes a nonce) with OIDC_ISSUER set; a password login (or a
    login form posted with ?code=&state= in its address) never reaches the provider."""

    get_settings = staticmethod(_oidc_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.UserModel = get_user_model()

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        if request is None or "nonce" not in kwargs or not sso_enabled():
            return None
        configuration = provider_configuration()
        self.OIDC_OP_TOKEN_ENDPOINT = configuration["token_endpoint"]
        self.OIDC_OP_USER_ENDPOINT = configuration["userinfo_endpoint"]
        self.OIDC_OP_JWKS_ENDPOINT = configuration["jwks_uri"]
        user: User | None = super().authenticate(request, **kwargs)
        return user

    def get_user(self, user_id: int) -> User | None:
        # ModelBackend's: a deactivated account's session ends (the library's keeps it).
        return ModelBackend.get_user(self, user_id)

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        if "nonce" in kwargs:  # the ID token (a signed userinfo response passes none)
            if not _same_issuer(payload.get("iss"), settings.OIDC_ISSUER):
                raise SuspiciousOperation("The ID token's issuer is not OIDC_ISSUER")
            audience = payload.get("aud")
            audiences = [audience] if isinstance(audience, str) else list(audience or [])
            client_id = settings.OIDC_RP_CLIENT_ID
            if client_id not in audiences or (
                len(audiences) > 1 and payload.get("azp") != client_id
            ):
                raise SuspiciousOperation("The ID token is not meant for this client")
        return payload

    def get_or_create_user(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> User | None:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        subject = payload.get("sub")
        if not isinstance(subject, str) or not subject or userinfo.get("sub") != subject:
            raise SuspiciousOperation("userinfo does not describe the ID token's subject")
        claims = {**payload, **userinfo}
        claims_check(claims)
        email = claims.get("email") if isinstance(claims.get("email"), str) else ""
        preferred = claims.get("preferred_username")
        return services.sso_user_authenticate(
            issuer=settings.OIDC_ISSUER,
            subject=subject,
            email=email or "",
            preferred_username=preferred if isinstance(preferred, str) else "",
        )


def sso_page(request: HttpRequest, message: str, *, status: int) -> HttpResponse:
    """Why single sign-on did not sign this browser in, with a way back to the login page."""
    context = {"message": message, "sso_label": sso_label(), "login_url": reverse("login")}
    return render(request, "accounts/sso_refused.html", context, status=status)


def _unavailable(request: HttpRequest, exc: ProviderUnavailable) -> HttpResponse:
    logger.warning("Single sign-on provider unavailable: %s", exc)
    message = gettext("%(provider)s cannot be reached just now. Try again in a few minutes.")
    return sso_page(request, message % {"provider": sso_label()}, status=503)


class OidcStartView(OIDCAuthenticationRequestView):  # type: ignore[misc]
    """Sends the browser to the provider (state, nonce and PKCE kept in the session)."""

    get_settings = staticmethod(_oidc_setting)

    @classmethod
    def start(cls, request: HttpRequest) -> HttpResponse:
        try:
            response: HttpResponse = cls.as_view()(request)
        except ProviderUnavailable as exc:
            return _unavailable(request, exc)
        return response


class OidcCallbackView(OIDCAuthenticationCallbackView):  # type: ignore[misc]
    """The provider's redirect back: the library checks the state and has OidcBackend log the
    account in; every way that can fail ends on a page that says so, never a 500."""

    get_settings = staticmethod(_oidc_setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            response: HttpResponse = super().get(request)
        except SsoRefused as exc:
            return sso_page(request, exc.message, status=403)
        except ProviderUnavailable as exc:
            return _unavailable(request, exc)
        except FLOW_FAILURES as exc:
            logger.warning("Single sign-on failed: %s", exc)
            return self.login_failure()
        return response

    def login_failure(self) -> HttpResponse:
        message = gettext(
            "Signing in with %(provider)s did not complete: it was cancelled, took too long, "
            "or the provider's answer could not be checked. Try again."
        )
        return sso_page(self.request, message % {"provider": sso_label()}, status=403)
