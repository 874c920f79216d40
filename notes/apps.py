from __future__ import annotations

from django.apps import AppConfig


class NotesConfig(AppConfig):
    name = "notes"

    def ready(self) -> None:
        from accounts.selectors import register_notebook_choices
        from core.quota import register_usage
        from notes.selectors import notebook_choices
        from notes.services import notes_bytes

        register_usage("notes", notes_bytes)
        register_notebook_choices(notebook_choices)
