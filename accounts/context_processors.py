from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def signup(request: HttpRequest) -> dict[str, str]:
    """SIGNUP for the templates, so that pages offer "Sign up" only when anyone may."""
    return {"signup_mode": settings.SIGNUP}
