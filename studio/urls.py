from __future__ import annotations

from django.urls import path

from studio import views

app_name = "studio"

urlpatterns = [
    path("notebooks/<int:notebook_id>/studio/", views.notebook_studio, name="notebook"),
    path("studio/<int:output_id>/", views.output_page, name="output"),
    path("studio/<int:output_id>/status/", views.output_status, name="status"),
    path("studio/<int:output_id>/regenerate/", views.output_regenerate, name="regenerate"),
    path("studio/<int:output_id>/cancel/", views.output_cancel, name="cancel"),
    path("studio/<int:output_id>/rename/", views.output_rename, name="rename"),
    path("studio/<int:output_id>/delete/", views.output_delete, name="delete"),
    path("studio/<int:output_id>/audio.mp3", views.output_audio, name="audio"),
]
