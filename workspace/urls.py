from __future__ import annotations

from django.urls import path

from workspace import views

app_name = "workspace"

urlpatterns = [
    path("notebooks/<int:notebook_id>/", views.workspace, name="page"),
    path("notebooks/<int:notebook_id>/ask/", views.workspace_ask, name="ask"),
    path("notebooks/<int:notebook_id>/sources-state/", views.sources_state, name="sources_state"),
]
