from __future__ import annotations

from django.apps import AppConfig


class WorkspaceConfig(AppConfig):
    name = "workspace"
