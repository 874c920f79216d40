"""Reads of API tokens, scoped to their owner, and of login lockouts."""

from __future__ import annotations

from collections.abc import Callable
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
    """The user's tokens, active first then revoked, newest first, with the notebooks a limited
    one is limited to (`notebooks`, prefetched)."""
    return (
        ApiToken.objects.filter(user=user)
        .prefetch_related("notebooks")
        .order_by("revoked_at", "-created_at")
    )


def api_token_get(*, user: User, token_id: int) -> ApiToken:
    """One of the user's tokens; Http404 for anyone else's."""
    return get_object_or_404(api_token_list(user=user), pk=token_id)


# The notebooks a token may be limited to: notes registers how to list them (AppConfig.ready),
# as apps tell core.quota what they count; accounts sits below notes and cannot ask it.
NotebookChoices = Callable[["User"], list[tuple[int, str]]]
_notebook_choices: list[NotebookChoices] = []


def register_notebook_choices(choices: NotebookChoices) -> None:
    """Called once by notes: `choices(user)` lists (id, title) of the notebooks they may see."""
    _notebook_choices[:] = [choices]


def token_notebook_choices(*, user: User) -> list[tuple[int, str]]:
    """The notebooks (id, title) a new token of `user` may be limited to: those they may see."""
    return [choice for choices in _notebook_choices for choice in choices(user)]


def login_lockout_ends(*, username: str, ip_address: str | None) -> datetime:
    """When the lockout of `username` from `ip_address` is over at the latest: django-axes
    counts the failures of the last cool-off period, and the last of them then ages out."""
    last = AccessAttempt.objects.filter(username=username, ip_address=ip_address).aggregate(
        last=Max("attempt_time")
    )["last"]
    ends: datetime = (last or timezone.now()) + get_cool_off()
    return ends
