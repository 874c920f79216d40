from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from guides.models import Guide


@admin.register(Guide)
class GuideAdmin(admin.ModelAdmin[Guide]):
    """Guides are derived data: viewable, never edited by hand."""

    list_display = ("__str__", "notebook", "status", "generator", "model", "ready_at", "updated_at")
    list_filter = ("kind", "status", "generator")
    search_fields = ("title", "notebook__title", "attachment__original_name", "error")
    list_select_related = ("notebook", "attachment")
    raw_id_fields = ("notebook", "attachment")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
