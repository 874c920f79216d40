from __future__ import annotations

from django.apps import AppConfig


class StudioConfig(AppConfig):
    name = "studio"

    def ready(self) -> None:
        # Imported here: models can be imported only once the app registry is ready.
        from core import fencing
        from studio.services.scheduling import STUDIO

        fencing.register(STUDIO)  # reaped by core.jobs.job_reap
