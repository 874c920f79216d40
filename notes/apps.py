from __future__ import annotations

from django.apps import AppConfig


class NotesConfig(AppConfig):
    name = "notes"

    def ready(self) -> None:
        from core.quota import register_usage
        from notes.services import notes_bytes

        register_usage("notes", notes_bytes)
