from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, URLResolver, include, path
from django.views.i18n import JavaScriptCatalog, set_language

from accounts.views import (
    LoginView,
    LogoutView,
    PasswordResetCompleteView,
    PasswordResetConfirmView,
    PasswordResetDoneView,
    PasswordResetView,
    oidc_callback,
    oidc_start,
    signup,
)
from core.metrics import metrics_view
from notebook.api import api


def _api_urls() -> tuple[list[URLPattern | URLResolver], str, str]:
    # The API answers 401 itself (token or session auth); LoginRequiredMiddleware would
    # redirect scripts to an HTML login page instead.
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            pattern.callback = login_not_required(pattern.callback)
    return patterns, app_name, namespace


urlpatterns = [
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    path("accounts/signup/", signup, name="signup"),
    # Forgot your password (Django's flow; 404 with OIDC_SSO_ONLY).
    path("accounts/password/reset/", PasswordResetView.as_view(), name="password_reset"),
    path(
        "accounts/password/reset/sent/",
        PasswordResetDoneView.as_view(),
        name="password_reset_done",
    ),
    path(
        "accounts/password/reset/<uidb64>/<token>/",
        PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "accounts/password/reset/done/",
        PasswordResetCompleteView.as_view(),
        name="password_reset_complete",
    ),
    # Single sign-on with OpenID Connect (404 without OIDC_ISSUER).
    path("accounts/sso/start/", oidc_start, name="oidc_start"),
    path("accounts/sso/callback/", oidc_callback, name="oidc_callback"),
    path("", include("accounts.urls")),
    # Settings → Language (also on the login page): django's set_language, POST only.
    path("i18n/setlang/", login_not_required(set_language), name="set_language"),
    # The translations our scripts use (gettext/ngettext/interpolate); base.html loads it.
    path("jsi18n/", login_not_required(JavaScriptCatalog.as_view()), name="javascript-catalog"),
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),  # staff and METRICS_TOKEN only; else 404
    path("api/", _api_urls()),
    path("", include("notes.urls")),
    path("", include("attachments.urls")),
    path("", include("search.urls")),
    path("", include("workspace.urls")),
    path("", include("chat.urls")),
    path("", include("guides.urls")),
    path("", include("intelligence.urls")),
    path("", include("studio.urls")),
    path("", include("exports.urls")),
]

admin.site.site_header = "Notebook administration"
admin.site.site_title = "Notebook admin"

if settings.DEBUG:
    from django.conf.urls.static import static

    urlpatterns += static(settings.MEDIA_URL, document_root=settings.MEDIA_ROOT)
