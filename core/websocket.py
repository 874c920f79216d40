"""WebSocket plumbing shared by the apps: the same-origin handshake check, and the check that a
socket's session still logs its user in (on every frame, and when the user's group is told
that a session of theirs ended).

Browsers send cookies with a WebSocket handshake to any origin, and the socket is not subject
to CORS: the Origin header is the only thing telling a page of ours from a page elsewhere.
Channels' AllowedHostsOriginValidator compares only its host name with ALLOWED_HOSTS, so a page
on another port or scheme of the same host (`http://127.0.0.1:9999`) passed; here the whole
origin must be ours.
"""

from __future__ import annotations

import logging
from importlib import import_module
from typing import Any, Literal, TypedDict
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http.request import split_domain_port, validate_host
from django.utils.crypto import constant_time_compare

logger = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": 80, "https": 443}
# The close code of a socket whose session ended (logged out, password changed): like HTTP's
# 401, the page has to log in again.
CLOSE_SESSION_ENDED = 4401

Origin = tuple[str, str, int]  # scheme, host, port (default ports filled in)


def parse_origin(value: str) -> Origin | None:
    """An http(s) origin as (scheme, host, port); None for anything else: `null`, other
    schemes, or a URL with more than scheme, host and port."""
    if not value or not value.isascii() or not value.isprintable() or " " in value:
        return None
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:  # a port out of range or not a number
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.path or parts.query or parts.fragment or "@" in parts.netloc:
        return None
    return parts.scheme, parts.hostname, DEFAULT_PORTS[parts.scheme] if port is None else port


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    """A request header; repeated ones joined with commas as Django does (which makes a
    repeated Origin or Host invalid)."""
    values = [value.decode("latin1") for key, value in scope.get("headers", []) if key == name]
    return ",".join(values) if values else None


def _scheme(scope: dict[str, Any]) -> str:
    """The HTTP scheme of the page that may open this socket: the socket's own, or behind a TLS
    proxy (SECURE_PROXY_SSL_HEADER) what the proxy says, as request.scheme does."""
    if settings.SECURE_PROXY_SSL_HEADER:
        meta_name, secure_value = settings.SECURE_PROXY_SSL_HEADER
        name = meta_name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin1")
        if (value := _header(scope, name)) is not None:
            return "https" if value.split(",", 1)[0].strip() == secure_value else "http"
    return "https" if scope.get("scheme", "ws") in ("wss", "https") else "http"


def _allowed_hosts() -> list[str]:
    if settings.DEBUG and not settings.ALLOWED_HOSTS:
        return [".localhost", "127.0.0.1", "[::1]"]  # as HttpRequest.get_host
    return list(settings.ALLOWED_HOSTS)


def origin_allowed(scope: dict[str, Any]) -> bool:
    """Whether the handshake comes from a page of this site: its Origin equals the socket's
    own scheme://host:port (Host allowed by ALLOWED_HOSTS), or exactly an entry of
    CSRF_TRUSTED_ORIGINS (wildcard entries are not honoured here). No Origin: refused."""
    origin = parse_origin(_header(scope, b"origin") or "")
    host = _header(scope, b"host") or ""
    domain, _ = split_domain_port(host)
    if origin is None or not domain or not validate_host(domain, _allowed_hosts()):
        return False
    if origin == parse_origin(f"{_scheme(scope)}://{host}"):
        return True
    trusted = {parse_origin(entry) for entry in settings.CSRF_TRUSTED_ORIGINS}
    return origin in trusted


class SameOriginValidator:
    """ASGI middleware refusing a WebSocket handshake unless `origin_allowed`; settings are
    read on each handshake."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator only guards WebSocket connections")
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        logger.info("refused a WebSocket handshake from origin %r", _header(scope, b"origin"))
        return await WebsocketDenier()(scope, receive, send)


# --- sessions ---------------------------------------------------------------------------------


def user_group_name(user_id: int) -> str:
    """The Channels group every socket of this user joins."""
    return f"user-{user_id}"


class UserClose(TypedDict):
    """A session of the user ended (logout, password change): each of their sockets checks its
    own session and closes if that one is gone."""

    type: Literal["user.close"]


class AccessChanged(TypedDict):
    """The user's access to a notebook changed (a membership revoked or narrowed, ownership
    moved): each of their sockets checks afresh that it may still show what it shows."""

    type: Literal["access.changed"]
    notebook_id: int


def user_sockets_tell(*, user_id: int, event: UserClose | AccessChanged) -> None:
    """Send `event` to every open socket of the user once the transaction commits (nothing
    when no channel layer is configured)."""
    layer = get_channel_layer()
    if layer is None:
        return
    group = user_group_name(user_id)
    transaction.on_commit(lambda: async_to_sync(layer.group_send)(group, event))


def session_is_current(session_key: str | None, user_id: int) -> bool:
    """Whether the session, read afresh from the session store, still logs in this user:
    not logged out or flushed, the password unchanged since (SECRET_KEY_FALLBACKS honoured as
    in django.contrib.auth.get_user), the backend still configured, the account active. Only
    reads: never cycles or flushes a session (the socket cannot hand the browser a new
    cookie)."""
    if not session_key:
        return False
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key).load()
    user_model = get_user_model()
    try:
        session_user = user_model._meta.pk.to_python(session.get(SESSION_KEY))
    except ValidationError:
        return False
    if session_user is None or session_user != user_id:
        return False
    if session.get(BACKEND_SESSION_KEY) not in settings.AUTHENTICATION_BACKENDS:
        return False
    user = user_model._default_manager.filter(pk=user_id, is_active=True).first()
    session_hash = session.get(HASH_SESSION_KEY)
    if user is None or not isinstance(session_hash, str) or not session_hash:
        return False
    if constant_time_compare(session_hash, user.get_session_auth_hash()):
        return True
    return any(
        constant_time_compare(session_hash, fallback)
        for fallback in user.get_session_auth_fallback_hash()
    )
