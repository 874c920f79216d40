"""Personal access tokens: create (the raw token is returned once), revoke, authenticate;
telling a user's open sockets that a session of theirs ended; sign-up and its invitations;
the account behind a single sign-on identity."""

from __future__ import annotations

import re
import secrets
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext, ngettext

from accounts.models import (
    ApiToken,
    Invitation,
    OidcIdentity,
    TokenScope,
    generate_token,
    hash_token,
    invitation_expiry,
    scope_attach,
)
from accounts.selectors import token_notebook_choices
from core.ratelimit import RateLimited, rate_limit
from core.websocket import user_sockets_tell

if TYPE_CHECKING:
    from core.types import User

MAX_ACTIVE_TOKENS = 20
# Writing last_used_at on every request would turn each API read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=5)
# Wrong tokens are counted by what they start with too, so that a guessing run spread over many
# addresses is still refused: "nbk_" and 8 characters (48 bits) tell runs apart, and say little
# about a real token (the limit keeps only a digest of the key besides).
WRONG_TOKEN_PREFIX_CHARS = 12


def api_token_create(
    *,
    user: User,
    name: str,
    read_only: bool = False,
    notebook_ids: Collection[int] | None = None,
) -> tuple[ApiToken, str]:
    """Create a token for `user`; returns the row and the raw token, which is never stored.
    `read_only` refuses its writes; `notebook_ids` (non-empty) limits it to those notebooks,
    each one the user may see (ValidationError otherwise, and nothing is created)."""
    name = " ".join(name.split())
    if not name:
        raise ValidationError(
            {"name": gettext("Name the token after the script that will use it.")}
        )
    if len(name) > 100:
        raise ValidationError({"name": gettext("Keep the name under 100 characters.")})
    if ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() >= MAX_ACTIVE_TOKENS:
        raise ValidationError(
            ngettext(
                "You can have at most %(count)d active token.",
                "You can have at most %(count)d active tokens.",
                MAX_ACTIVE_TOKENS,
            )
            % {"count": MAX_ACTIVE_TOKENS}
        )
    limit = set(notebook_ids or ())
    if limit - {pk for pk, _title in token_notebook_choices(user=user)}:
        raise ValidationError(
            {"notebooks": gettext("Choose among your own notebooks (one is no longer there).")}
        )
    raw = generate_token()
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            token_hash=hash_token(raw),
            prefix=raw[:10],
            read_only=read_only,
            notebook_limited=bool(limit),
        )
        token.notebooks.set(sorted(limit))
    return token, raw


def api_token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke a token (idempotent); it stops working at once."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def api_token_authenticate(*, raw: str) -> User | None:
    """The active user owning this raw token, or None. The user carries the token's scope
    (accounts.models.scope_of), read afresh on every call: a narrowed or revoked token acts so
    on its next request."""
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
    notebook_ids = None
    if token.notebook_limited:
        notebook_ids = frozenset(token.notebooks.values_list("pk", flat=True))
    user = token.user
    scope_attach(user, TokenScope(token.pk, read_only=token.read_only, notebook_ids=notebook_ids))
    return user


def api_token_check(*, raw: str, address: str) -> User | None:
    """`api_token_authenticate` for a request from `address` (a core.ratelimit key), for the
    API and MCP alike. A right token is never refused for others' failures. A wrong one spends
    the "token" budget of its address and of its prefix; once either is spent, RateLimited
    (429) instead of None (401) until that window ends."""
    user = api_token_authenticate(raw=raw)
    if user is not None:
        return user
    refusals: list[RateLimited] = []
    for key in (address, f"prefix:{raw[:WRONG_TOKEN_PREFIX_CHARS]}"):
        try:
            rate_limit(scope="token", key=key)
        except RateLimited as exc:
            refusals.append(exc)
    if refusals:
        raise max(refusals, key=lambda exc: exc.retry_after)
    return None


def user_sockets_close(*, user: User) -> None:
    """After the transaction commits, tell the user's open sockets to check their sessions:
    those whose session has ended (logged out, password changed) close with 4401, the others
    stay open. Call it after the session is flushed or the password saved."""
    user_sockets_tell(user_id=user.pk, event={"type": "user.close"})


def invitation_create(
    *, created_by: User | None, note: str = "", expires_at: datetime | None = None
) -> tuple[Invitation, str]:
    """A new invitation (by default for INVITATION_DAYS); returns the row and the raw token,
    which is never stored."""
    raw = secrets.token_urlsafe(32)  # 256 bits, like API tokens, without their nbk_ marker
    invitation = Invitation.objects.create(
        token_hash=hash_token(raw),
        note=" ".join(note.split())[:200],
        created_by=created_by,
        expires_at=expires_at or invitation_expiry(),
    )
    return invitation, raw


def invitation_find(*, raw: str) -> Invitation | None:
    """The unused, unexpired invitation with this raw token, or None."""
    if not raw or len(raw) > 200:
        return None
    return Invitation.objects.filter(
        token_hash=hash_token(raw), used_at__isnull=True, expires_at__gt=timezone.now()
    ).first()


def user_signup(*, username: str, password: str, invitation: str | None) -> User:
    """Create an account; with `invitation` (a raw token) claim that invitation in the same
    transaction, or raise ValidationError and create nothing. The claim is a conditional
    UPDATE: of two sign-ups with one invitation at once, the second waits for the first's row
    lock, then finds it used."""
    with transaction.atomic():
        user: User = get_user_model().objects.create_user(username=username, password=password)
        if invitation is not None:
            claimed = Invitation.objects.filter(
                token_hash=hash_token(invitation),
                used_at__isnull=True,
                expires_at__gt=timezone.now(),
            ).update(used_at=timezone.now(), used_by=user)
            if claimed != 1:
                raise ValidationError(
                    gettext("This invitation has been used or has expired."), code="invitation"
                )
    return user


# What Django's username validator accepts; anything else in a provider's name becomes "-".
_NOT_IN_USERNAME = re.compile(r"[^\w.@+-]+")
USERNAME_MAX = 150


def sso_username(*, preferred_username: str, email: str) -> str:
    """A free username for a new single sign-on account: the provider's preferred_username,
    else the email address's local part, else "user"; characters Django refuses become "-",
    and "-2", "-3", … follow when the name is taken (case-insensitively)."""
    base = preferred_username.strip() or email.partition("@")[0]
    base = _NOT_IN_USERNAME.sub("-", base).strip("-.")[: USERNAME_MAX - 8] or "user"
    users = get_user_model().objects
    name, n = base, 1
    while users.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def sso_user_authenticate(
    *, issuer: str, subject: str, email: str, preferred_username: str
) -> User | None:
    """The active account of this (issuer, subject), made on its first login (no usable
    password; username from sso_username); None for a deactivated account. Never looks an
    account up by email. Two first logins of one subject at once make one account: the second
    finds the first's identity once its insert has failed on the unique pair."""
    now = timezone.now()
    identity = (
        OidcIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    )
    if identity is None:
        for _attempt in range(3):  # a clash on the username alone: a new one is picked
            try:
                with transaction.atomic():
                    user: User = get_user_model().objects.create_user(
                        username=sso_username(preferred_username=preferred_username, email=email),
                        email=email,
                        password=None,
                    )
                    identity = OidcIdentity.objects.create(
                        user=user, issuer=issuer, subject=subject, last_login_at=now
                    )
                break
            except IntegrityError:  # the same subject's other first login, or the username
                identity = (
                    OidcIdentity.objects.select_related("user")
                    .filter(issuer=issuer, subject=subject)
                    .first()
                )
                if identity is not None:
                    break
        if identity is None:
            raise IntegrityError("no free username for a new single sign-on account")
        return identity.user if identity.user.is_active else None
    OidcIdentity.objects.filter(pk=identity.pk).update(last_login_at=now)
    user = identity.user
    if email and user.email != email:  # kept up to date for password-less mail; never matched on
        user.email = email
        user.save(update_fields=["email"])
    return user if user.is_active else None
