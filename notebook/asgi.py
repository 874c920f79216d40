"""ASGI entry point: HTTP through Django, WebSocket through Channels (origin- and auth-checked),
and `/mcp` through the MCP server (mcpserver.asgi: personal access tokens)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "notebook.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from core.embeddings import warm_up_in_background  # noqa: E402
from core.websocket import SameOriginValidator  # noqa: E402
from mcpserver.asgi import lifespan, with_mcp  # noqa: E402
from notebook.routing import websocket_urlpatterns  # noqa: E402

# The process that imports this serves requests (daphne under `manage.py serve`, or any ASGI
# server): load the embedding model now, in a daemon thread, rather than in the first search.
# Other manage.py commands never import this module.
warm_up_in_background()

application = ProtocolTypeRouter(
    {
        # `/mcp` is the MCP server (personal access tokens); every other path is Django's.
        "http": with_mcp(django_asgi_app),
        # The whole origin (scheme, host, port) must be this site's, not only its host name:
        # a page on another port of the same host is another site.
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        # Servers that speak the lifespan protocol start the MCP session manager with it;
        # daphne does not, and the first /mcp request starts it (mcpserver.asgi).
        "lifespan": lifespan,
    }
)
