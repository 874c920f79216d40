"""daphne serving the ASGI application in a child process forked from the test process, so it
inherits the test settings and the test database (shared by the browser and crash tests)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from daphne.testing import DaphneProcess
from django.db import connections

from notebook.daphne_http import install


def start_daphne(application: Callable[[], Any], *, timeout: float = 60) -> DaphneProcess:
    """Start daphne on a free port of localhost and wait until it listens (`server.port`).
    `application` is a module-level factory: the child process calls it."""
    connections.close_all()  # the child must open its own connections, not share ours
    # As `manage.py serve` runs it: 414/431 for requests over Twisted's limits.
    server = DaphneProcess("localhost", application, setup=install)
    server.daemon = True
    server.start()
    deadline = time.monotonic() + timeout
    while not server.ready.wait(timeout=0.5):
        if not server.is_alive() or time.monotonic() > deadline:
            error = "" if server.errors.empty() else server.errors.get()[1]
            raise RuntimeError(f"daphne did not start: {error}")
    return server
