from __future__ import annotations

from django.urls import path

from attachments import views

app_name = "attachments"

urlpatterns = [
    path("notes/<int:note_id>/", views.note_detail, name="note_detail"),
    path("notes/<int:note_id>/attachments/", views.attachment_upload, name="upload"),
    path(
        "notebooks/<int:notebook_id>/sources/",
        views.notebook_source_upload,
        name="notebook_upload",
    ),
    path("notebooks/<int:notebook_id>/links/", views.notebook_link_add, name="notebook_link"),
    path("attachments/<int:attachment_id>/row/", views.attachment_row, name="row"),
    path("attachments/<int:attachment_id>/source/", views.source_row, name="source"),
    path("attachments/<int:attachment_id>/file/", views.attachment_download, name="download"),
    path("attachments/<int:attachment_id>/pages/", views.attachment_pages, name="pages"),
    path(
        "attachments/<int:attachment_id>/thumbnail/", views.attachment_thumbnail, name="thumbnail"
    ),
    path(
        "attachments/<int:attachment_id>/reprocess/", views.attachment_reprocess, name="reprocess"
    ),
    path("attachments/<int:attachment_id>/delete/", views.attachment_delete, name="delete"),
    path("attachments/<int:attachment_id>/password/", views.attachment_password, name="password"),
    path("attachments/<int:attachment_id>/unlock/", views.attachment_unlock_reset, name="unlock"),
]
