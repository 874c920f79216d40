from __future__ import annotations

from django.apps import AppConfig


class AttachmentsConfig(AppConfig):
    name = "attachments"

    def ready(self) -> None:
        from django.db.models.signals import post_delete

        from attachments.models import NoteAttachment
        from attachments.services.files import remove_files_when_deleted

        post_delete.connect(
            remove_files_when_deleted, sender=NoteAttachment, dispatch_uid="attachment_files"
        )
