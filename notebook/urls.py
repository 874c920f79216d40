from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, URLResolver, include, path
from django.views.i18n import JavaScriptCatalog, set_language

from accounts.views import LogoutView, signup
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
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True),
        name="login",
    ),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    path("accounts/signup/", signup, name="signup"),
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
    path("", include("exports.urls")),
]

admin.site.site_header = "Notebook administration"
admin.site.site_title = "Notebook admin"

if settings.DEBUG:
    from django.conf.urls.static import static

    urlpatterns += static(settings.MEDIA_URL, document_root=settings.MEDIA_ROOT)
