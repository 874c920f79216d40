from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from accounts import views

app_name = "accounts"

urlpatterns = [
    path("settings/", views.account_settings, name="settings"),
    path("settings/tokens/<int:token_id>/revoke/", views.api_token_revoke, name="token_revoke"),
    path(
        "settings/password/",
        views.PasswordChangeView.as_view(success_url="/settings/password/done/"),
        name="password_change",
    ),
    path(
        "settings/password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
]
