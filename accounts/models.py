from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

TOKEN_PREFIX = "nbk_"  # noqa: S105 - a marker, not a secret
INVITATION_DAYS = 7


def hash_token(raw: str) -> str:
    # Tokens are 256 random bits, so a plain SHA-256 is enough (no need for a slow KDF).
    return hashlib.sha256(raw.encode()).hexdigest()


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class ApiToken(models.Model):
    """A personal access token for scripts; only its SHA-256 is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    # First characters of the token, shown in lists so users can tell tokens apart.
    prefix = models.CharField(max_length=12, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Scope: a read-only token may only read (GET in the API; reading tools and asking over MCP).
    read_only = models.BooleanField(default=False)
    # Limited to `notebooks` when set. The flag, not the rows, says so: a limited token whose
    # notebooks were all deleted (their rows cascade away) sees none, not all. A string
    # reference: accounts sits below notes and imports nothing of it.
    notebook_limited = models.BooleanField(default=False)
    notebooks = models.ManyToManyField("notes.Notebook", blank=True, related_name="+")

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True)
class TokenScope:
    """What the personal access token of one request may do: travels on the request's user
    (`scope_attach`), so that notes.selectors narrows every read to `notebook_ids` (None: every
    notebook the user may see) and the API and MCP refuse writes when `read_only`."""

    token_id: int
    read_only: bool = False
    notebook_ids: frozenset[int] | None = None


_SCOPE_ATTRIBUTE = "token_scope"


def scope_attach(user: object, scope: TokenScope) -> None:
    """Mark this user object (one request's) as acting through a token with `scope`."""
    setattr(user, _SCOPE_ATTRIBUTE, scope)


def scope_of(user: object) -> TokenScope | None:
    """The token scope this user object acts under; None for a browser session (no limit)."""
    scope = getattr(user, _SCOPE_ATTRIBUTE, None)
    return scope if isinstance(scope, TokenScope) else None


def invitation_expiry() -> datetime:
    return timezone.now() + timedelta(days=INVITATION_DAYS)


class Invitation(models.Model):
    """A one-use sign-up link for SIGNUP=invite; only the SHA-256 of its token is stored, so the
    link is shown once, when it is created."""

    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    note = models.CharField(
        max_length=200, blank=True, help_text="Who it is for (a name, an email address)."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        editable=False,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(default=invitation_expiry)
    used_at = models.DateTimeField(null=True, blank=True, editable=False)
    used_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.note or f"Invitation of {self.created_at:%Y-%m-%d %H:%M}"

    @property
    def is_usable(self) -> bool:
        return self.used_at is None and self.expires_at > timezone.now()


class OidcIdentity(models.Model):
    """Who a user is at an OpenID Connect provider: its issuer and the subject (`sub`) it
    gives them, which it never reassigns. Single sign-on finds the account by this pair only,
    never by email address (anyone who can set an address at the provider would otherwise
    take over the local account that has it)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_unique")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
