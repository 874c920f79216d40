from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from accounts import services
from accounts.models import ApiToken, Invitation, OidcIdentity


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    list_display = ("name", "user", "prefix", "created_at", "last_used_at", "is_active")
    list_filter = ("revoked_at", "created_at")
    search_fields = ("name", "prefix", "user__username")
    list_select_related = ("user",)
    readonly_fields = ("user", "prefix", "created_at", "last_used_at")
    fields = ("user", "name", "prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a token is created by its owner, who must see the raw value once

    @admin.display(boolean=True, description="active")
    def is_active(self, obj: ApiToken) -> bool:
        return obj.is_active

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).")


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin[Invitation]):
    """Invitations for SIGNUP=invite. Adding one shows its sign-up link, once: only the link's
    SHA-256 is stored."""

    list_display = ("__str__", "is_usable", "created_by", "created_at", "expires_at", "used_by")
    list_filter = ("created_at", "expires_at", "used_at")
    search_fields = ("note", "created_by__username", "used_by__username")
    list_select_related = ("created_by", "used_by")
    readonly_fields = ("created_by", "created_at", "used_at", "used_by")
    actions = ["expire"]

    def get_fields(self, request: HttpRequest, obj: Invitation | None = None) -> Any:
        if obj is None:
            return ("note", "expires_at")
        return ("note", "expires_at", "created_by", "created_at", "used_at", "used_by")

    def save_model(
        self, request: HttpRequest, obj: Invitation, form: ModelForm[Invitation], change: bool
    ) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        saved, raw = services.invitation_create(
            created_by=request.user,  # type: ignore[arg-type]  # the admin's user is logged in
            note=obj.note,
            expires_at=obj.expires_at,
        )
        obj.pk = saved.pk  # the admin goes on with `obj`: its log entry, the page below
        obj.refresh_from_db()
        path = f"{reverse('signup')}?{urlencode({'invite': raw})}"
        request.invitation_link = request.build_absolute_uri(path)  # type: ignore[attr-defined]

    def response_add(
        self, request: HttpRequest, obj: Invitation, post_url_continue: str | None = None
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Invitation created",
            "invitation": obj,
            "link": request.invitation_link,  # type: ignore[attr-defined]
        }
        return TemplateResponse(request, "admin/accounts/invitation/created.html", context)

    @admin.display(boolean=True, description="usable")
    def is_usable(self, obj: Invitation) -> bool:
        return obj.is_usable

    @admin.action(description="Expire selected invitations now")
    def expire(self, request: HttpRequest, queryset: QuerySet[Invitation]) -> None:
        now = timezone.now()
        count = queryset.filter(used_at__isnull=True, expires_at__gt=now).update(expires_at=now)
        self.message_user(request, f"Expired {count} invitation(s).")


@admin.register(OidcIdentity)
class OidcIdentityAdmin(admin.ModelAdmin[OidcIdentity]):
    """Single sign-on identities. Adding one by hand links an existing account to a subject
    at the provider (the only way an account made before single sign-on gets it: logins are
    never matched by email address)."""

    list_display = ("subject", "issuer", "user", "created_at", "last_login_at")
    search_fields = ("subject", "issuer", "user__username", "user__email")
    list_select_related = ("user",)
    raw_id_fields = ("user",)
    readonly_fields = ("created_at", "last_login_at")
