from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from studio.models import StudioOutput


@admin.register(StudioOutput)
class StudioOutputAdmin(admin.ModelAdmin[StudioOutput]):
    """Studio outputs are made from the sources: viewable and deletable, never edited."""

    list_display = ("__str__", "title", "notebook", "created_by", "status", "progress",
                    "created_at", "ready_at")  # fmt: skip
    list_filter = ("kind", "status", "generator")
    search_fields = ("title", "notebook__title", "error")
    list_select_related = ("notebook", "created_by")
    raw_id_fields = ("notebook", "created_by")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
