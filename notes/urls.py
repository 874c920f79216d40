from __future__ import annotations

from django.urls import path

from notes import views

app_name = "notes"

urlpatterns = [
    path("", views.notebook_list, name="notebook_list"),
    path("notebooks/<int:notebook_id>/rename/", views.notebook_rename, name="notebook_rename"),
    path("notebooks/<int:notebook_id>/delete/", views.notebook_delete, name="notebook_delete"),
    path("notebooks/<int:notebook_id>/notes/", views.notebook_notes, name="notebook_notes"),
    path("notebooks/<int:notebook_id>/share/", views.notebook_share, name="notebook_share"),
    path(
        "notebooks/<int:notebook_id>/members/<int:member_id>/",
        views.member_update,
        name="member_update",
    ),
    path(
        "notebooks/<int:notebook_id>/members/<int:member_id>/remove/",
        views.member_remove,
        name="member_remove",
    ),
    path(
        "notebooks/<int:notebook_id>/members/<int:member_id>/owner/",
        views.notebook_transfer,
        name="notebook_transfer",
    ),
    path("notebooks/<int:notebook_id>/leave/", views.notebook_leave, name="notebook_leave"),
    path("notebooks/<int:notebook_id>/notes/new/", views.note_create, name="note_create"),
    path("notes/<int:note_id>/edit/", views.note_edit, name="note_edit"),
    path("notes/<int:note_id>/preview/", views.note_preview, name="note_preview"),
    path("notes/<int:note_id>/trash/", views.note_trash, name="note_trash"),
    path("notes/<int:note_id>/restore/", views.note_restore, name="note_restore"),
    path("notes/<int:note_id>/delete/", views.note_delete, name="note_delete"),
]
