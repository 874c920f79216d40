from __future__ import annotations

from django.urls import path

from intelligence import views

app_name = "intelligence"

urlpatterns = [
    path("sources/<int:attachment_id>/", views.source_view, name="source"),
    path("sources/<int:attachment_id>/profile/", views.profile_edit, name="edit"),
    path("sources/<int:attachment_id>/name/", views.profile_name, name="name"),
]
