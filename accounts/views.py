"""Sign-up, login (with single sign-on), the login lockout page, password resets by email, and
the settings page (personal access tokens)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required, login_required
from django.contrib.auth.forms import PasswordChangeForm, SetPasswordForm
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts import selectors, services, sso
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
    "sso": gettext_lazy(
        "This Notebook signs people in with single sign-on only: your account is made when you "
        "first sign in on the login page."
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
    if settings.OIDC_SSO_ONLY:
        return _signup_refused(request, "sso")
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


@method_decorator(login_not_required, name="dispatch")
class LoginView(auth_views.LoginView):
    """Django's login page, offering "Sign in with …" when single sign-on is on; with
    OIDC_SSO_ONLY only that button, and a posted password is refused (403) unchecked."""

    redirect_authenticated_user = True

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "POST" and settings.OIDC_SSO_ONLY:
            return self.render_to_response(self.get_context_data(sso_only_refused=True), status=403)
        return super().dispatch(request, *args, **kwargs)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        if sso.sso_enabled():
            context["sso_label"] = sso.sso_label()
            context["sso_only"] = settings.OIDC_SSO_ONLY
        return context


@login_not_required
@require_GET
def oidc_start(request: HttpRequest) -> HttpResponse:
    """To the provider's login (404 without OIDC_ISSUER)."""
    if not sso.sso_enabled():
        raise Http404
    return sso.OidcStartView.start(request)


_oidc_callback = sso.OidcCallbackView.as_view()


@login_not_required
@require_GET
def oidc_callback(request: HttpRequest) -> HttpResponse:
    """Back from the provider: signed in, or a page saying why not (404 without OIDC_ISSUER)."""
    if not sso.sso_enabled():
        raise Http404
    response: HttpResponse = _oidc_callback(request)
    return response


class _PasswordLoginOnly:
    """Password resets exist only where passwords log in: 404 with OIDC_SSO_ONLY."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if settings.OIDC_SSO_ONLY:
            raise Http404
        response: HttpResponse = super().dispatch(request, *args, **kwargs)  # type: ignore[misc]
        return response


@method_decorator(login_not_required, name="dispatch")
class PasswordResetView(_PasswordLoginOnly, auth_views.PasswordResetView):
    """Django's "forgot your password": the same page and the same redirect whether the
    address has an account or not (a mail goes only to accounts with a usable password).
    Every post spends the client address's budget and the typed address's, before anything
    is looked up, so a refusal (429) says nothing about accounts either."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        email = str(request.POST.get("email", "")).strip().lower()
        try:
            rate_limit(scope="reset_address", key=address_key(request))
            if email:
                rate_limit(scope="reset_email", key=f"email:{email}")
        except RateLimited as exc:
            return rate_limited_page(request, exc, back_url=reverse("password_reset"))
        response: HttpResponse = super().post(request, *args, **kwargs)
        return response


@method_decorator(login_not_required, name="dispatch")
class PasswordResetDoneView(_PasswordLoginOnly, auth_views.PasswordResetDoneView):
    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)
        context["timeout_minutes"] = settings.PASSWORD_RESET_TIMEOUT // 60
        return context


@method_decorator(login_not_required, name="dispatch")
class PasswordResetConfirmView(_PasswordLoginOnly, auth_views.PasswordResetConfirmView):
    """Django's reset link: it works once (its token signs the password it replaces) and for
    PASSWORD_RESET_TIMEOUT, else 404 with a page that says so; the new password logs this
    browser in, ends the user's other sessions (their hash changed) and closes their
    sockets."""

    post_reset_login = True
    post_reset_login_backend = "django.contrib.auth.backends.ModelBackend"

    def render_to_response(self, context: dict[str, Any], **kwargs: Any) -> HttpResponse:
        if not context.get("validlink"):  # used, expired or made up: the page says which
            kwargs.setdefault("status", 404)
        response: HttpResponse = super().render_to_response(context, **kwargs)
        return response

    def form_valid(self, form: SetPasswordForm[Any]) -> HttpResponse:
        response = super().form_valid(form)
        services.user_sockets_close(user=form.user)
        return response


@method_decorator(login_not_required, name="dispatch")
class PasswordResetCompleteView(_PasswordLoginOnly, auth_views.PasswordResetCompleteView):
    pass
