from __future__ import annotations

from django.urls import path

from exports import views

app_name = "exports"

urlpatterns = [
    path("notebooks/<int:notebook_id>/export/", views.notebook_export, name="notebook"),
    path("chats/<int:conversation_id>/export/", views.conversation_export, name="conversation"),
    path("studio/<int:output_id>/export.md", views.studio_markdown, name="studio_markdown"),
    path("studio/<int:output_id>/cards.csv", views.studio_csv, name="studio_csv"),
    path("studio/<int:output_id>/export.pdf", views.studio_pdf, name="studio_pdf"),
    path("settings/export/", views.user_export, name="user"),
    path("settings/delete/", views.account_delete, name="account_delete"),
]
