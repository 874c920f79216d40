from __future__ import annotations

from django.apps import AppConfig


class IntelligenceConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "intelligence"
    verbose_name = "Document intelligence"

    def ready(self) -> None:
        # Imported here: models can be imported only once the app registry is ready.
        from intelligence import receivers

        receivers.connect()
