"""The ASGI wiring of /mcp: which requests reach the MCP endpoint, and the lifespan protocol
for servers that speak it (daphne does not: tests/mcpserver/test_mcp.py serves under it)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from mcpserver.asgi import endpoint, is_mcp
from notebook.asgi import application


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        ({"type": "http", "path": "/mcp"}, True),
        ({"type": "http", "path": "/mcp/"}, True),
        ({"type": "http", "path": "/mcpx"}, False),
        ({"type": "http", "path": "/api/mcp"}, False),
        ({"type": "websocket", "path": "/mcp"}, False),
    ],
)
def test_only_the_mcp_path_goes_to_the_mcp_endpoint(scope, expected):
    assert is_mcp(scope) is expected


def test_the_lifespan_protocol_starts_and_stops_the_session_manager():
    sent: list[dict[str, Any]] = []

    async def go() -> bool:
        messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
        running_between: list[bool] = []

        async def receive() -> dict[str, Any]:
            if sent:  # startup answered: the manager runs now
                running_between.append(endpoint._running is not None)
            return next(messages)

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await application({"type": "lifespan"}, receive, send)
        return running_between == [True]

    assert anyio.run(go)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert endpoint._running is None
