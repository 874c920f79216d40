from __future__ import annotations

from django.urls import path

from chat import compaction_views, memory_views, mention_views, views

app_name = "chat"

urlpatterns = [
    path("attachments/<int:attachment_id>/ask/", views.ask_pdf, name="ask_pdf"),
    path(
        "notebooks/<int:notebook_id>/chats/",
        views.notebook_conversations,
        name="notebook_conversations",
    ),
    path("notes/<int:note_id>/chats/", views.note_conversations, name="note_conversations"),
    path("chats/mentions/", mention_views.mentions, name="mentions"),
    path("chats/<int:conversation_id>/", views.conversation_detail, name="conversation"),
    path("chats/<int:conversation_id>/ask/", views.conversation_ask, name="ask"),
    path("chats/<int:conversation_id>/rename/", views.conversation_rename, name="rename"),
    path("chats/<int:conversation_id>/delete/", views.conversation_delete, name="delete"),
    path("chats/messages/<int:message_id>/", views.message_detail, name="message"),
    path("chats/messages/<int:message_id>/retry/", views.message_retry, name="retry"),
    path("chats/messages/<int:message_id>/save/", views.message_save, name="save"),
    path("chats/messages/<int:message_id>/save/form/", views.message_save_form, name="save_form"),
    path("notebooks/<int:notebook_id>/memories/", memory_views.notebook_memories, name="memories"),
    path(
        "notebooks/<int:notebook_id>/memories/forget/",
        memory_views.memories_forget,
        name="memories_forget",
    ),
    path("memories/<int:memory_id>/delete/", memory_views.memory_delete, name="memory_delete"),
    path(
        "chats/<int:conversation_id>/compact/",
        compaction_views.conversation_compact,
        name="compact",
    ),
]
