from __future__ import annotations

from django.apps import AppConfig


class NotebookConfig(AppConfig):
    """The project package as an app: template tags, the `serve` command, the pgvector migration."""

    name = "notebook"
    verbose_name = "Notebook"
