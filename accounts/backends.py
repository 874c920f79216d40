"""Authentication backends: django-axes' lockout check in front of Django's ModelBackend."""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.http import HttpRequest


class LoginAttemptsBackend(AxesStandaloneBackend):  # type: ignore[misc]  # axes is untyped
    """Refuses a login while its username is locked out from the client's address; logs no one
    in itself. A login over HTTP always has a request (the login page, the admin's); without
    one (manage.py, the test client's login()) there is no address to lock by, so the check
    steps aside instead of raising as axes' own backend does."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is not None:
            super().authenticate(request, username, password, **kwargs)  # raises when locked
