from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest

from notes.models import Note, Notebook


class NoteInline(admin.TabularInline[Note, Notebook]):
    model = Note
    fields = ("title", "author", "trashed_at", "updated_at")
    readonly_fields = ("updated_at",)
    extra = 0
    show_change_link = True


@admin.register(Notebook)
class NotebookAdmin(admin.ModelAdmin[Notebook]):
    list_display = ("title", "owner", "note_count", "created_at", "updated_at")
    list_filter = ("created_at",)
    search_fields = ("title", "description", "owner__username", "owner__email")
    list_select_related = ("owner",)
    raw_id_fields = ("owner",)
    date_hierarchy = "created_at"
    inlines = [NoteInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Notebook]:
        queryset: QuerySet[Notebook] = super().get_queryset(request)
        return queryset.annotate(
            _note_count=Count("notes", filter=Q(notes__trashed_at__isnull=True))
        )

    @admin.display(description="notes", ordering="_note_count")
    def note_count(self, obj: Notebook) -> int:
        return int(getattr(obj, "_note_count", 0))


class TrashedFilter(admin.SimpleListFilter):
    title = "in trash"
    parameter_name = "trashed"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Note]
    ) -> list[tuple[str, str]]:
        return [("yes", "In trash"), ("no", "Live")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Note]) -> QuerySet[Note]:
        if self.value() == "yes":
            return queryset.filter(trashed_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(trashed_at__isnull=True)
        return queryset


@admin.register(Note)
class NoteAdmin(admin.ModelAdmin[Note]):
    list_display = ("title", "notebook", "author", "is_trashed", "updated_at")
    list_filter = (TrashedFilter, "updated_at")
    search_fields = ("title", "body", "notebook__title", "author__username")
    list_select_related = ("notebook", "author")
    raw_id_fields = ("notebook", "author")
    readonly_fields = ("created_at", "updated_at")
    date_hierarchy = "updated_at"

    @admin.display(boolean=True, description="trashed", ordering="trashed_at")
    def is_trashed(self, obj: Note) -> bool:
        return obj.is_trashed
