"""Types shared across apps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User as User
    from django_htmx.middleware import HtmxDetails


class AuthenticatedHttpRequest(HttpRequest):
    """What views behind login see: a real user and django-htmx's details."""

    user: User
    htmx: HtmxDetails
