"""Sign-up, the login lockout page, and the settings page (personal access tokens)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required, login_required
from django.contrib.auth.forms import PasswordChangeForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts import selectors, services
from accounts.forms import ApiTokenForm, SignupForm
from core.ratelimit import (
    RateLimited,
    address_key,
    client_network,
    rate_limit,
    rate_limited_page,
    wait_text,
)
from core.types import AuthenticatedHttpRequest

# Why the sign-up page shows no form (403), by SIGNUP and invitation.
SIGNUP_REFUSED = {
    "closed": gettext_lazy(
        "Sign-up is closed. Ask an administrator of this Notebook to create an account for you."
    ),
    "invite": gettext_lazy(
        "Sign-up is by invitation. Ask an administrator of this Notebook for an invitation link."
    ),
    "invalid": gettext_lazy(
        "This invitation link cannot be used: it has been used already, has expired, or is "
        "incomplete. Ask an administrator for a new one."
    ),
}


@login_not_required
@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    """Sign-up for anyone (SIGNUP=open), for holders of a valid invitation, which the new
    account uses up (invite), or for nobody (closed). Every post spends the address's "signup"
    budget, whatever comes of it."""
    if request.user.is_authenticated:
        return redirect("notes:notebook_list")
    data = request.POST if request.method == "POST" else request.GET
    invite = data.get("invite", "") if settings.SIGNUP == "invite" else None
    if request.method == "POST":
        try:
            rate_limit(scope="signup", key=address_key(request))
        except RateLimited as exc:
            back_url = reverse("signup") + (f"?{urlencode({'invite': invite})}" if invite else "")
            return rate_limited_page(request, exc, back_url=back_url)
    if settings.SIGNUP == "closed":
        return _signup_refused(request, "closed")
    if invite is not None and services.invitation_find(raw=invite) is None:
        return _signup_refused(request, "invalid" if invite else "invite")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user = services.user_signup(
                username=form.cleaned_data["username"],
                password=form.cleaned_data["password1"],
                invitation=invite,
            )
        except ValidationError:  # someone else used the invitation meanwhile
            return _signup_refused(request, "invalid")
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, gettext("Welcome to Notebook. Start by creating a notebook."))
        return redirect("notes:notebook_list")
    return render(request, "registration/signup.html", {"form": form, "invite": invite})


def _signup_refused(request: HttpRequest, reason: str) -> HttpResponse:
    context = {"refusal": SIGNUP_REFUSED[reason]}
    return render(request, "registration/signup.html", context, status=403)


def login_locked_out(request: HttpRequest, *args: object) -> HttpResponse:
    """django-axes' lockout response (AXES_LOCKOUT_CALLABLE), for the login page and the
    admin's: 429 and until when logging in as that user from this address is paused. (axes
    passes (request, response, credentials), or under ASGI (request, credentials); the request
    carries what we need either way.)"""
    credentials = getattr(request, "axes_credentials", None) or {}
    username = str(credentials.get("username") or request.POST.get("username", ""))
    ip_address = getattr(request, "axes_ip_address", None) or client_network(request)
    ends = selectors.login_lockout_ends(username=username, ip_address=ip_address)
    wait = max(int((ends - timezone.now()).total_seconds()), 1)
    template = "accounts/locked_out.html"
    if getattr(request, "htmx", False):
        template += "#lockout"
    context = {"username": username, "wait": wait_text(wait), "ends": ends}
    response = render(request, template, context, status=429)
    response["Retry-After"] = str(wait)
    return response


@never_cache  # it shows a new token's only copy: no cache, shared or the browser's, keeps it
@login_required
@require_http_methods(["GET", "POST"])
def account_settings(request: AuthenticatedHttpRequest) -> HttpResponse:
    notebooks = selectors.token_notebook_choices(user=request.user)
    form = ApiTokenForm(request.POST or None, notebooks=notebooks)
    new_token: str | None = None
    if request.method == "POST" and form.is_valid():
        try:
            _, new_token = services.api_token_create(
                user=request.user,
                name=form.cleaned_data["name"],
                read_only=form.cleaned_data["read_only"],
                notebook_ids=form.cleaned_data["notebooks"],
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            form = ApiTokenForm(notebooks=notebooks)
    context = {
        "form": form,
        "new_token": new_token,
        "tokens": selectors.api_token_list(user=request.user),
    }
    template = "accounts/settings.html#tokens" if request.htmx else "accounts/settings.html"
    return render(request, template, context)


@login_required
@require_POST
def api_token_revoke(request: AuthenticatedHttpRequest, token_id: int) -> HttpResponse:
    token = selectors.api_token_get(user=request.user, token_id=token_id)
    services.api_token_revoke(token=token)
    messages.success(
        request,
        gettext("Revoked “%(name)s”. Scripts using it now get 401.") % {"name": token.name},
    )
    if request.htmx:
        notebooks = selectors.token_notebook_choices(user=request.user)
        context = {
            "form": ApiTokenForm(notebooks=notebooks),
            "tokens": selectors.api_token_list(user=request.user),
        }
        return render(request, "accounts/settings.html#tokens", context)
    return redirect("accounts:settings")


class LogoutView(auth_views.LogoutView):
    """Django's logout; then the sockets of the ended session close (4401) instead of
    answering questions for a browser that has logged out."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = request.user if request.user.is_authenticated else None  # logout() resets it
        response = super().post(request, *args, **kwargs)
        if user is not None:
            services.user_sockets_close(user=user)
        return response


class PasswordChangeView(auth_views.PasswordChangeView):
    """Django's password change (which logs out every other session of the user); then their
    open sockets close (4401) too, as does this session's old one (its key was cycled)."""

    def form_valid(self, form: PasswordChangeForm) -> HttpResponse:
        response = super().form_valid(form)
        services.user_sockets_close(user=form.user)
        return response
