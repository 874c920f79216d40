"""Reads of API tokens, scoped to their owner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from accounts.models import ApiToken

if TYPE_CHECKING:
    from notebook.types import User


def api_token_list(*, user: User) -> QuerySet[ApiToken]:
    """The user's tokens, active first then revoked, newest first."""
    return ApiToken.objects.filter(user=user).order_by("revoked_at", "-created_at")


def api_token_get(*, user: User, token_id: int) -> ApiToken:
    """One of the user's tokens; Http404 for anyone else's."""
    return get_object_or_404(api_token_list(user=user), pk=token_id)
