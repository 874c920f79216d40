from __future__ import annotations

from django.apps import AppConfig


class IntelligenceConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "intelligence"
    verbose_name = "Document intelligence"

    def ready(self) -> None:
        # Imported here: models can be imported only once the app registry is ready.
        from core import fencing
        from intelligence import receivers
        from intelligence.services import PROFILES

        receivers.connect()
        fencing.register(PROFILES)  # reaped by core.jobs.job_reap
