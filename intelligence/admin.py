from __future__ import annotations

from django.contrib import admin

from attachments.admin import ReadOnlyAdmin
from intelligence.models import SourceProfile


@admin.register(SourceProfile)
class SourceProfileAdmin(ReadOnlyAdmin):
    list_display = ("attachment", "doc_type", "confidence", "better_name", "method", "status")
    list_filter = ("doc_type", "method", "status", "edited")
    search_fields = ("better_name", "canonical_text", "attachment__original_name")
    list_select_related = ("attachment",)
    raw_id_fields = ("attachment",)
    exclude = ("embedding",)
