from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def signup(request: HttpRequest) -> dict[str, str]:
    """SIGNUP for the templates, so that pages offer "Sign up" only when anyone may; "sso"
    with OIDC_SSO_ONLY, where accounts are made by signing in."""
    return {"signup_mode": "sso" if settings.OIDC_SSO_ONLY else settings.SIGNUP}
