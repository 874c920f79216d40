"""The Channels layer: in-memory on one machine, Redis (REDIS_URL) across machines."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from notebook.asgi import application


def _round_trip() -> dict[str, str]:
    layer = get_channel_layer()
    assert layer is not None

    async def go() -> dict[str, str]:
        channel = await layer.new_channel()
        await layer.group_add("conversation-1", channel)
        await layer.group_send("conversation-1", {"type": "chat.token", "text": "hello"})
        message = await layer.receive(channel)
        await layer.group_discard("conversation-1", channel)
        return dict(message)

    return async_to_sync(go)()


def test_in_memory_layer_delivers_group_messages():
    assert _round_trip() == {"type": "chat.token", "text": "hello"}


def test_redis_layer_delivers_group_messages(settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:6379/14"]},
        }
    }
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    try:
        assert _round_trip() == {"type": "chat.token", "text": "hello"}
    finally:
        channel_layers.backends.clear()


def test_websocket_routes_are_origin_and_auth_checked():
    from channels.security.websocket import OriginValidator

    websocket_app = application.application_mapping["websocket"]
    assert isinstance(websocket_app, OriginValidator)


@pytest.mark.django_db  # Channels closes stale DB connections around every consumer event
@pytest.mark.parametrize("origin", [b"https://evil.example", b"null"])
def test_websocket_from_a_foreign_origin_is_refused(origin):
    from channels.testing import WebsocketCommunicator

    async def go() -> bool:
        communicator = WebsocketCommunicator(
            application, "/ws/chat/1/", headers=[(b"origin", origin), (b"host", b"localhost")]
        )
        connected, _ = await communicator.connect()
        await communicator.disconnect()
        return bool(connected)

    assert async_to_sync(go)() is False
