from __future__ import annotations

from django.contrib import admin

from chat.models import Conversation, ConversationSummary, Memory, Message


class MessageInline(admin.TabularInline[Message, Conversation]):
    model = Message
    fields = ("role", "status", "answerer", "confidence", "created_at")
    readonly_fields = ("role", "status", "answerer", "confidence", "created_at")
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin[Conversation]):
    list_display = ("title", "owner", "notebook", "note", "created_at", "updated_at")
    list_filter = ("created_at",)
    search_fields = ("title", "owner__username", "notebook__title", "note__title")
    list_select_related = ("owner", "notebook", "note")
    raw_id_fields = ("owner", "notebook", "note")
    date_hierarchy = "created_at"
    inlines = [MessageInline]


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin[Message]):
    list_display = ("__str__", "conversation", "role", "status", "answerer", "confidence",
                    "created_at")  # fmt: skip
    list_filter = ("role", "status", "answerer", "confidence")
    search_fields = ("content", "conversation__title", "conversation__owner__username")
    list_select_related = ("conversation",)
    raw_id_fields = ("conversation", "reply_to")
    date_hierarchy = "created_at"
    exclude = ("embedding",)


@admin.register(ConversationSummary)
class ConversationSummaryAdmin(admin.ModelAdmin[ConversationSummary]):
    list_display = ("__str__", "conversation", "summarizer", "created_at")
    list_filter = ("summarizer",)
    list_select_related = ("conversation",)
    raw_id_fields = ("conversation", "first_message", "last_message")


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin[Memory]):
    list_display = ("__str__", "owner", "notebook", "kind", "importance", "created_at")
    list_filter = ("kind",)
    search_fields = ("text", "owner__username", "notebook__title")
    list_select_related = ("owner", "notebook")
    raw_id_fields = ("owner", "notebook", "source_message")
    exclude = ("embedding",)
