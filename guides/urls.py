from __future__ import annotations

from django.urls import path

from guides import views

app_name = "guides"

urlpatterns = [
    path("attachments/<int:attachment_id>/guide/", views.source_guide, name="source_guide"),
    path("notebooks/<int:notebook_id>/guide/", views.notebook_guide, name="notebook_guide"),
]
