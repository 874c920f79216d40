from __future__ import annotations

from django.apps import AppConfig


class StudioConfig(AppConfig):
    name = "studio"

    def ready(self) -> None:
        # Imported here: models can be imported only once the app registry is ready.
        from django.db.models.signals import post_delete

        from core import fencing
        from studio.models import StudioOutput
        from studio.services.audio import remove_audio_when_deleted
        from studio.services.scheduling import STUDIO

        fencing.register(STUDIO)  # reaped by core.jobs.job_reap
        post_delete.connect(
            remove_audio_when_deleted, sender=StudioOutput, dispatch_uid="studio_audio"
        )
