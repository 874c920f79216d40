from __future__ import annotations

from django.apps import AppConfig


class GuidesConfig(AppConfig):
    name = "guides"
