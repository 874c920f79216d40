from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from core.models import Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin[Job]):
    """The background queue, read-only: what waits, what runs, what failed and why."""

    list_display = ("pk", "func", "args", "user", "state", "attempts", "created_at", "started_at")
    list_filter = ("state", "group")
    search_fields = ("func", "user__username", "error")
    date_hierarchy = "created_at"
    readonly_fields = [field.name for field in Job._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False
