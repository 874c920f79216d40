from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from attachments import services
from attachments.models import DocumentChunk, DocumentPage, NoteAttachment, VectorBuild


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Pages and chunks are derived data: viewable, never edited by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(NoteAttachment)
class NoteAttachmentAdmin(admin.ModelAdmin[NoteAttachment]):
    list_display = (
        "original_name",
        "note",
        "uploaded_by",
        "status",
        "stage",
        "page_count",
        "ocr_pages",
        "size",
        "language",
        "short_error",
        "created_at",
    )
    list_filter = ("status", "stage", "language", "created_at")
    search_fields = ("original_name", "sha256", "error", "note__title", "uploaded_by__username")
    list_select_related = ("note", "uploaded_by")
    raw_id_fields = ("note", "uploaded_by")
    readonly_fields = (
        "uuid", "file", "size", "sha256", "page_count", "status", "stage", "progress_current",
        "progress_total", "error", "ocr_pages", "attempts", "language", "search_config",
        "embedding_model", "timings", "created_at", "updated_at", "heartbeat_at", "ready_at",
    )  # fmt: skip
    actions = ["reprocess"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # uploads go through validation in the app or the API

    @admin.display(description="error")
    def short_error(self, obj: NoteAttachment) -> str:
        return obj.error if len(obj.error) <= 80 else obj.error[:79] + "…"

    @admin.action(description="Reprocess selected attachments")
    def reprocess(self, request: HttpRequest, queryset: QuerySet[NoteAttachment]) -> None:
        queued = 0
        for attachment in queryset:
            if not attachment.is_active:
                services.attachment_reprocess(attachment=attachment)
                queued += 1
        self.message_user(request, f"Queued {queued} attachment(s) for reprocessing.")


@admin.register(DocumentPage)
class DocumentPageAdmin(ReadOnlyAdmin):
    list_display = ("attachment", "number", "is_ocr")
    list_filter = ("is_ocr",)
    search_fields = ("text", "attachment__original_name")
    list_select_related = ("attachment",)
    raw_id_fields = ("attachment",)


@admin.register(DocumentChunk)
class DocumentChunkAdmin(ReadOnlyAdmin):
    list_display = ("attachment", "index", "page_number", "char_count", "token_count")
    search_fields = ("content", "attachment__original_name")
    list_select_related = ("attachment",)
    raw_id_fields = ("attachment",)
    exclude = ("embedding", "search_vector")


@admin.register(VectorBuild)
class VectorBuildAdmin(ReadOnlyAdmin):
    """Background re-embeddings (`manage.py reembed --background`): which model, how far."""

    list_display = ("model_name", "dimensions", "backend", "state", "created_at", "completed_at",
                    "switched_at")  # fmt: skip
    list_filter = ("state",)
