from __future__ import annotations

from django.apps import AppConfig


class GuidesConfig(AppConfig):
    name = "guides"

    def ready(self) -> None:
        # Imported here: models can be imported only once the app registry is ready.
        from core import fencing
        from guides import receivers
        from guides.services.scheduling import GUIDES

        receivers.connect()
        fencing.register(GUIDES)  # reaped by core.jobs.job_reap
