"""Requests over Twisted's size limits, sent to a real daphne as we run it: a request line over
16 KiB gets 414 and headers over the limits 431, instead of a dropped connection or a bare 400;
requests within the limits are served as before, also on a kept-alive connection."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from notebook.database import database_url
from tests.daphne_server import start_daphne
from tests.fixtures.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

LONG_URL = b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n"
LONG_HEADER = b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"
LARGE_HEADERS = (
    b"GET / HTTP/1.1\r\nHost: localhost\r\n"
    + b"".join(b"X-H%d: %s\r\n" % (i, b"a" * 1000) for i in range(20))
    + b"\r\n"
)
MANY_HEADERS = (
    b"GET / HTTP/1.1\r\nHost: localhost\r\n"
    + b"".join(b"X-%d: a\r\n" % i for i in range(600))
    + b"\r\n"
)


def _asgi_application() -> Any:  # module level: the child process calls it
    from channels.routing import get_default_application

    return get_default_application()


def exchange(port: int, request: bytes) -> bytes:
    """Send `request` whole, then read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        return read_all(sock)


def read_all(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def assert_refused(response: bytes, status: bytes, detail: bytes) -> None:
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 " + status, response[:300]
    assert b"Connection: close" in head
    assert detail in body


def assert_all_refusals(port: int) -> None:
    assert_refused(
        exchange(port, LONG_URL),
        b"414 URI Too Long",
        b"The request line is longer than 16,384 bytes.",
    )
    assert_refused(
        exchange(port, LONG_HEADER),
        b"431 Request Header Fields Too Large",
        b"A request header is longer than 16,384 bytes.",
    )
    assert_refused(
        exchange(port, LARGE_HEADERS),
        b"431 Request Header Fields Too Large",
        b"The request headers exceed 16,384 bytes.",
    )
    assert_refused(
        exchange(port, MANY_HEADERS),
        b"431 Request Header Fields Too Large",
        b"The request has more than 500 headers.",
    )


@pytest.fixture
def port(transactional_db) -> Iterator[int]:
    """daphne as tests/daphne_server.py starts it for the browser and crash tests."""
    server = start_daphne(_asgi_application)
    try:
        yield server.port.value
    finally:
        server.terminate()
        server.join(10)


def test_oversized_request_heads_are_answered(port):
    assert_all_refusals(port)


def test_requests_within_the_limits_are_served_also_before_a_refusal_on_one_connection(port):
    ok = b"GET /accounts/login/?next=/" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(ok)
        first = b""
        while b"</html>" not in first:
            chunk = sock.recv(65536)
            assert chunk, first[:300]
            first += chunk
        assert first.startswith(b"HTTP/1.1 200 OK\r\n"), first[:300]
        # The same connection: the next request's line is counted afresh.
        sock.sendall(LONG_URL)
        assert_refused(read_all(sock), b"414 URI Too Long", b"The request line is longer")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_web_process_serve_starts_answers_them(transactional_db):
    """`python -m notebook.daphne_http`, the command `manage.py serve` runs for the web."""
    from notebook.management.commands import serve

    assert "notebook.daphne_http" in Path(serve.__file__).read_text()
    port = _free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "notebook.settings",
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "SECRET_KEY": "test-only-" + "x" * 50,
    }
    cmd = [sys.executable, "-m", "notebook.daphne_http", "-b", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(
        [*cmd, "notebook.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def listening() -> bool:
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_until(listening, 60, interval=0.2, message="daphne did not listen")
        assert_all_refusals(port)
    finally:
        proc.terminate()
        proc.wait(15)
