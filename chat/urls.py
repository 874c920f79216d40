from __future__ import annotations

from django.urls import path

from chat import views

app_name = "chat"

urlpatterns = [
    path(
        "notebooks/<int:notebook_id>/chats/",
        views.notebook_conversations,
        name="notebook_conversations",
    ),
    path("notes/<int:note_id>/chats/", views.note_conversations, name="note_conversations"),
    path("chats/<int:conversation_id>/", views.conversation_detail, name="conversation"),
    path("chats/<int:conversation_id>/ask/", views.conversation_ask, name="ask"),
    path("chats/<int:conversation_id>/rename/", views.conversation_rename, name="rename"),
    path("chats/<int:conversation_id>/delete/", views.conversation_delete, name="delete"),
    path("chats/messages/<int:message_id>/", views.message_detail, name="message"),
    path("chats/messages/<int:message_id>/retry/", views.message_retry, name="retry"),
]
