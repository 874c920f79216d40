from __future__ import annotations

from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "exports"
