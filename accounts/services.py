"""Personal access tokens: create (the raw token is returned once), revoke, authenticate."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.utils import timezone

from accounts.models import ApiToken, generate_token, hash_token

if TYPE_CHECKING:
    from notebook.types import User

MAX_ACTIVE_TOKENS = 20
# Writing last_used_at on every request would turn each API read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=5)


def api_token_create(*, user: User, name: str) -> tuple[ApiToken, str]:
    """Create a token for `user`; returns the row and the raw token, which is never stored."""
    name = " ".join(name.split())
    if not name:
        raise ValidationError({"name": "Name the token after the script that will use it."})
    if len(name) > 100:
        raise ValidationError({"name": "Keep the name under 100 characters."})
    if ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() >= MAX_ACTIVE_TOKENS:
        raise ValidationError(f"You can have at most {MAX_ACTIVE_TOKENS} active tokens.")
    raw = generate_token()
    token = ApiToken.objects.create(
        user=user, name=name, token_hash=hash_token(raw), prefix=raw[:10]
    )
    return token, raw


def api_token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke a token (idempotent); it stops working at once."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def api_token_authenticate(*, raw: str) -> User | None:
    """The active user owning this raw token, or None."""
    if not raw or len(raw) > 200:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=hash_token(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user
