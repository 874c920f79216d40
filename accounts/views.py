"""Sign-up, the login lockout page, and the settings page (personal access tokens)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_not_required, login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from accounts import selectors, services
from accounts.forms import ApiTokenForm, SignupForm
from notebook.ratelimit import client_ip, wait_text
from notebook.types import AuthenticatedHttpRequest


@login_not_required
@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("notes:notebook_list")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, "Welcome to Notebook. Start by creating a notebook.")
        return redirect("notes:notebook_list")
    return render(request, "registration/signup.html", {"form": form})


def login_locked_out(request: HttpRequest, *args: object) -> HttpResponse:
    """django-axes' lockout response (AXES_LOCKOUT_CALLABLE), for the login page and the
    admin's: 429 and until when logging in as that user from this address is paused. (axes
    passes (request, response, credentials), or under ASGI (request, credentials); the request
    carries what we need either way.)"""
    credentials = getattr(request, "axes_credentials", None) or {}
    username = str(credentials.get("username") or request.POST.get("username", ""))
    ip_address = getattr(request, "axes_ip_address", None) or client_ip(request)
    ends = selectors.login_lockout_ends(username=username, ip_address=ip_address)
    wait = max(int((ends - timezone.now()).total_seconds()), 1)
    template = "accounts/locked_out.html"
    if getattr(request, "htmx", False):
        template += "#lockout"
    context = {"username": username, "wait": wait_text(wait), "ends": ends}
    response = render(request, template, context, status=429)
    response["Retry-After"] = str(wait)
    return response


@login_required
@require_http_methods(["GET", "POST"])
def account_settings(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = ApiTokenForm(request.POST or None)
    new_token: str | None = None
    if request.method == "POST" and form.is_valid():
        try:
            _, new_token = services.api_token_create(
                user=request.user, name=form.cleaned_data["name"]
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            form = ApiTokenForm()
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
    messages.success(request, f"Revoked “{token.name}”. Scripts using it now get 401.")
    if request.htmx:
        context = {"form": ApiTokenForm(), "tokens": selectors.api_token_list(user=request.user)}
        return render(request, "accounts/settings.html#tokens", context)
    return redirect("accounts:settings")
