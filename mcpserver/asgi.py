"""`/mcp` in the ASGI application: every request authenticated by a personal access token,
then served by the MCP SDK's Streamable HTTP transport.

Authentication happens on every HTTP request, before the SDK sees it: the token is looked up
afresh (a revoked token gets 401 on its very next call, also inside an MCP session a client
keeps open) and its scope rides on the user in the request's ASGI scope, where the tools read
it (mcpserver.server). Wrong tokens spend the same "token" budget as in the REST API. The
Host header must be one of ALLOWED_HOSTS, as for every Django page.

The transport is stateless with JSON responses: every POST carries a whole exchange, no
session lives in one process's memory (`manage.py serve` runs several web processes on one
port, and the kernel deals a client's connections out among them) and no session id is ever
taken for who calls. The SDK's session manager still needs its task group running: daphne
speaks no ASGI lifespan, so it starts on the first request, in a task of the process's event
loop that lasts until the process ends (a server that does speak lifespan starts and stops it
there instead).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.db import close_old_connections
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from accounts.services import api_token_check
from core.ratelimit import RateLimited, address_key
from mcpserver.server import BASE_URL_KEY, USER_KEY, mcp

if TYPE_CHECKING:
    from core.types import User

logger = logging.getLogger(__name__)
PATH = "/mcp"
# The JSON-RPC error code of a refused request (the SDK's clients show the message).
UNAUTHORIZED_CODE = -32001


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Any:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": UNAUTHORIZED_CODE, "message": message}}
    ).encode()

    async def respond(scope: Scope, receive: Receive, send: Send) -> None:
        head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        head += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": body})

    return respond


UNAUTHENTICATED = (
    "Authentication required: send Authorization: Bearer nbk_… with a personal access token "
    "(Settings → Personal access tokens). A revoked token is refused."
)


def _authenticate(request: ASGIRequest, raw: str) -> User | None:
    close_old_connections()
    try:
        return api_token_check(raw=raw, address=address_key(request))
    finally:
        close_old_connections()


class McpApplication:
    """The MCP endpoint: token authentication in front of the SDK's Streamable HTTP app."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._build()

    def _build(self) -> None:
        # Hosts are checked against ALLOWED_HOSTS below, as Django checks them; the SDK's
        # own check (localhost only, unless listed again here) is off.
        self.app: ASGIApp = mcp.streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._manager = mcp.session_manager  # the one that app serves with
        self._running: asyncio.Task[None] | None = None
        self._started: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None

    async def start(self) -> None:
        """Run the SDK's session manager (once per event loop: a server has one) and wait
        until it is ready."""
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            # Another loop (a forked process's, a test's): the manager runs only once, in the
            # loop that started it, so this loop gets one of its own.
            self._build()
        self._loop = loop
        if self._running is None:
            self._started, self._stop = asyncio.Event(), asyncio.Event()
            # A task of its own: the manager's task group outlives the request that starts it.
            self._running = loop.create_task(
                self._run(self._manager, self._started, self._stop), name="mcp-session-manager"
            )
        if self._started is not None:
            await self._started.wait()

    @staticmethod
    async def _run(
        manager: StreamableHTTPSessionManager, started: asyncio.Event, stop: asyncio.Event
    ) -> None:
        async with manager.run():
            started.set()
            await stop.wait()

    async def stop(self) -> None:
        if self._running is not None and self._stop is not None:
            self._stop.set()
            await self._running
            self._build()  # a manager runs once: a later start gets a new one

    async def lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI lifespan protocol, for servers that speak it (daphne does not)."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = ASGIRequest(scope, io.BytesIO())  # (the body is the SDK's to read)
        try:
            host = request.get_host()
        except DisallowedHost:
            await _error(400, "This host name is not served here (ALLOWED_HOSTS).")(
                scope, receive, send
            )
            return
        scheme, _sep, raw = request.headers.get("Authorization", "").partition(" ")
        user = None
        if scheme.lower() == "bearer" and raw.strip():
            try:
                user = await sync_to_async(_authenticate, thread_sensitive=False)(
                    request, raw.strip()
                )
            except RateLimited as exc:
                headers = {"Retry-After": str(exc.retry_after)}
                await _error(429, exc.message, headers)(scope, receive, send)
                return
        if user is None:
            headers = {"WWW-Authenticate": 'Bearer realm="Notebook"'}
            await _error(401, UNAUTHENTICATED, headers)(scope, receive, send)
            return
        await self.start()
        base_url = f"{request.scheme}://{host}"
        await self.app({**scope, USER_KEY: user, BASE_URL_KEY: base_url}, receive, send)


def is_mcp(scope: Scope) -> bool:
    path = str(scope.get("path", ""))
    return scope["type"] == "http" and (path == PATH or path.startswith(PATH + "/"))


# One per process: it owns the SDK's session manager, which runs once.
endpoint = McpApplication()


def with_mcp(http: Callable[[Any, Any, Any], Awaitable[None]]) -> ASGIApp:
    """HTTP: `/mcp` to the MCP endpoint, everything else to `http` (Django)."""

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if is_mcp(scope):
            await endpoint(scope, receive, send)
        else:
            await http(scope, receive, send)

    return route


lifespan = endpoint.lifespan  # only the MCP endpoint has anything to start
