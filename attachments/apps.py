from __future__ import annotations

from django.apps import AppConfig


class AttachmentsConfig(AppConfig):
    name = "attachments"
