"""The Channels layer (in-memory on one machine, Redis (REDIS_URL) across machines), and the
WebSocket handshake's origin check."""

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
    from core.websocket import SameOriginValidator

    websocket_app = application.application_mapping["websocket"]
    assert isinstance(websocket_app, SameOriginValidator)


# --- the handshake's Origin -------------------------------------------------------------------
# Browsers send the victim's cookies with a cross-site WebSocket handshake and apply no CORS to
# it: only the Origin tells our pages from another site's. Each case opens alice's own
# conversation with her session cookie, so an accepted handshake is only the origin check's
# doing. (Channels' AllowedHostsOriginValidator, which compared the host name alone, accepted
# every "other port" and "other scheme" case below.)


@pytest.fixture
def alices_socket(alice):
    """Open alice's conversation's socket with her session cookie and the given headers."""
    from django.test import Client

    from chat.services import conversation_create
    from notes.services import notebook_create

    conversation = conversation_create(
        owner=alice, notebook=notebook_create(owner=alice, title="Mine")
    )
    client = Client()
    client.force_login(alice)
    cookie = "; ".join(f"{k}={v.value}" for k, v in client.cookies.items()).encode()

    def connects(*, host: bytes, origin: bytes | None, scheme: str | None = None, extra=()) -> bool:
        from channels.testing import WebsocketCommunicator

        headers = [(b"host", host), (b"cookie", cookie), *extra]
        if origin is not None:
            headers.append((b"origin", origin))

        async def go() -> bool:
            communicator = WebsocketCommunicator(
                application, f"/ws/chat/{conversation.pk}/", headers=headers
            )
            if scheme is not None:  # daphne sets it: wss behind TLS
                communicator.scope["scheme"] = scheme
            connected, _ = await communicator.connect(timeout=10)
            await communicator.disconnect()
            return bool(connected)

        return async_to_sync(go)()

    return connects


SAME_ORIGIN = [
    (b"localhost", b"http://localhost", None),
    (b"localhost", b"http://localhost:80", None),  # the default port, spelled out
    (b"localhost:80", b"http://localhost", None),
    (b"127.0.0.1:8010", b"http://127.0.0.1:8010", None),
    (b"LOCALHOST:8010", b"http://localhost:8010", None),  # host names ignore case
    (b"[::1]:8010", b"http://[::1]:8010", None),
    (b"localhost", b"https://localhost", "wss"),
    (b"localhost:443", b"https://localhost", "wss"),
    (b"127.0.0.1:8443", b"https://127.0.0.1:8443", "wss"),
]


@pytest.mark.django_db(transaction=True)  # Channels closes connections around each query
@pytest.mark.parametrize(("host", "origin", "scheme"), SAME_ORIGIN)
def test_a_socket_from_the_same_origin_is_accepted(alices_socket, host, origin, scheme):
    assert alices_socket(host=host, origin=origin, scheme=scheme) is True


FOREIGN_ORIGIN = {
    "other site": (b"localhost", b"https://evil.example", None),
    "other port": (b"127.0.0.1:8010", b"http://127.0.0.1:9999", None),
    "other port, default on the page": (b"127.0.0.1:8010", b"http://127.0.0.1", None),
    "other port, default on the socket": (b"127.0.0.1", b"http://127.0.0.1:8010", None),
    "https page, http socket": (b"127.0.0.1:8010", b"https://127.0.0.1:8010", None),
    "https page on 443, http socket": (b"localhost", b"https://localhost", None),
    "http page, https socket": (b"localhost", b"http://localhost", "wss"),
    "ftp": (b"127.0.0.1:21", b"ftp://127.0.0.1:21", None),
    "ftp, default port": (b"localhost", b"ftp://localhost", None),
    "null": (b"localhost", b"null", None),
    "empty": (b"localhost", b"", None),
    "no origin": (b"localhost", None, None),
    "a path": (b"localhost", b"http://localhost/", None),
    "credentials": (b"localhost", b"http://user@localhost", None),
    "two origins": (b"localhost", b"http://localhost,http://localhost", None),
    "a host not allowed": (b"evil.example", b"http://evil.example", None),  # DNS rebinding
    "a sub-domain": (b"localhost", b"http://a.localhost", None),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("host", "origin", "scheme"), FOREIGN_ORIGIN.values(), ids=FOREIGN_ORIGIN)
def test_a_socket_from_another_origin_is_refused(alices_socket, host, origin, scheme):
    assert alices_socket(host=host, origin=origin, scheme=scheme) is False


@pytest.mark.django_db(transaction=True)
def test_a_socket_from_a_trusted_origin_is_accepted_only_on_its_exact_port(alices_socket, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://notebook.example.com", "http://localhost:3000"]
    host = b"localhost:8000"
    assert alices_socket(host=host, origin=b"https://notebook.example.com") is True
    assert alices_socket(host=host, origin=b"https://notebook.example.com:443") is True
    assert alices_socket(host=host, origin=b"http://localhost:3000") is True
    assert alices_socket(host=host, origin=b"https://notebook.example.com:8443") is False
    assert alices_socket(host=host, origin=b"http://notebook.example.com") is False
    assert alices_socket(host=host, origin=b"http://localhost:3001") is False
    assert alices_socket(host=host, origin=b"https://www.notebook.example.com") is False
    # The Host must still be ours.
    assert alices_socket(host=b"evil.example", origin=b"https://notebook.example.com") is False


@pytest.mark.django_db(transaction=True)
def test_behind_a_tls_proxy_x_forwarded_proto_gives_the_scheme(alices_socket, settings):
    https = [(b"x-forwarded-proto", b"https")]
    # Without BEHIND_TLS_PROXY the header is anyone's to send: ignored.
    assert settings.SECURE_PROXY_SSL_HEADER is None
    assert alices_socket(host=b"localhost", origin=b"https://localhost", extra=https) is False
    assert alices_socket(host=b"localhost", origin=b"http://localhost", extra=https) is True

    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")  # BEHIND_TLS_PROXY
    assert alices_socket(host=b"localhost", origin=b"https://localhost", extra=https) is True
    assert alices_socket(host=b"localhost", origin=b"http://localhost", extra=https) is False
    forwarded = [(b"x-forwarded-proto", b"https, http")]  # the first (outermost) proxy's
    assert alices_socket(host=b"localhost", origin=b"https://localhost", extra=forwarded) is True
    http = [(b"x-forwarded-proto", b"http")]
    assert alices_socket(host=b"localhost", origin=b"https://localhost", extra=http) is False
    assert alices_socket(host=b"localhost", origin=b"http://localhost", extra=http) is True
    # No header: the socket's own scheme.
    assert alices_socket(host=b"localhost", origin=b"http://localhost") is True
    assert alices_socket(host=b"localhost", origin=b"https://localhost") is False
