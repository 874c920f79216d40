"""WebSocket routes; the chat issue adds /ws/chat/<conversation_id>/ here."""

from __future__ import annotations

from django.urls import URLPattern

websocket_urlpatterns: list[URLPattern] = []
