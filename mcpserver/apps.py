from __future__ import annotations

from django.apps import AppConfig


class McpServerConfig(AppConfig):
    """The MCP server at /mcp (mcpserver.asgi): no models, no URLs of Django's."""

    name = "mcpserver"
    verbose_name = "MCP server"
