from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The library layer: what every app may use and which imports none of them."""

    name = "core"
    verbose_name = "Core"
