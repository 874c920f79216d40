"""Reads of API tokens, scoped to their owner, and of login lockouts."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from axes.helpers import get_cool_off
from axes.models import AccessAttempt
from django.db.models import Max, QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone

from accounts.models import ApiToken

if TYPE_CHECKING:
    from core.types import User


def api_token_list(*, user: User) -> QuerySet[ApiToken]:
    """The user's tokens, active first then revoked, newest first."""
    return ApiToken.objects.filter(user=user).order_by("revoked_at", "-created_at")


def api_token_get(*, user: User, token_id: int) -> ApiToken:
    """One of the user's tokens; Http404 for anyone else's."""
    return get_object_or_404(api_token_list(user=user), pk=token_id)


def login_lockout_ends(*, username: str, ip_address: str | None) -> datetime:
    """When the lockout of `username` from `ip_address` is over at the latest: django-axes
    counts the failures of the last cool-off period, and the last of them then ages out."""
    last = AccessAttempt.objects.filter(username=username, ip_address=ip_address).aggregate(
        last=Max("attempt_time")
    )["last"]
    ends: datetime = (last or timezone.now()) + get_cool_off()
    return ends
