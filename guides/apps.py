from __future__ import annotations

from django.apps import AppConfig


class GuidesConfig(AppConfig):
    name = "guides"

    def ready(self) -> None:
        # Imported here: models can be imported only once the app registry is ready.
        from guides import receivers

        receivers.connect()
