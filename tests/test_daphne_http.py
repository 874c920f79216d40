"""Requests over Twisted's size limits, sent to a real daphne as we run it: a request line over
16 KiB gets 414 and headers over the limits 431, instead of a dropped connection or a bare 400;
a body over MAX_REQUEST_MB gets 413 before it is sent (from its Content-Length) or as soon as
a chunked one passes the limit; requests within the limits are served as before, also on a
kept-alive connection."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from notebook.database import database_url
from notes.models import Note
from tests.daphne_server import start_daphne
from tests.factories import NotebookFactory, NoteFactory
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


def huge_upload_head(path: bytes, length: int = 10**12) -> bytes:
    """An upload's head declaring `length` bytes of body (a terabyte), sent without its body."""
    return (
        b"POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n"
        b"Content-Type: multipart/form-data; boundary=BoUnDaRy\r\n\r\n"
    ) % (path, length)


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
    # Answered from the head alone: the body is never sent, and the server closes.
    limit_mb = f"{settings.MAX_REQUEST_MB:,}".encode()
    too_large = b"this server accepts at most " + limit_mb + b" MB in one request"
    page = exchange(port, huge_upload_head(b"/notes/1/attachments/"))
    assert_refused(page, b"413 Content Too Large", too_large)
    assert b"Content-Type: text/plain; charset=utf-8" in page
    api = exchange(port, huge_upload_head(b"/api/notes/1/attachments?x=1"))
    assert_refused(api, b"413 Content Too Large", too_large)
    assert b"Content-Type: application/json" in api
    detail = json.loads(api.partition(b"\r\n\r\n")[2])["detail"]
    assert detail == too_large_detail(settings.MAX_REQUEST_MB)


def too_large_detail(limit_mb: int) -> str:
    return (
        f"The request body is too large: this server accepts at most {limit_mb:,} MB in one "
        "request (MAX_REQUEST_MB)."
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


def test_the_request_limit_by_default_lets_the_largest_upload_through():
    """MAX_REQUEST_MB defaults to MAX_UPLOAD_FILES files of MAX_UPLOAD_MB, and room for the rest."""
    assert settings.MAX_REQUEST_MB == settings.MAX_UPLOAD_MB * settings.MAX_UPLOAD_FILES + 4
    assert settings.MAX_REQUEST_BYTES == settings.MAX_REQUEST_MB * 1024 * 1024


SMALL_LIMIT_MB = 1


@pytest.fixture
def small_limit_port(settings, transactional_db) -> Iterator[int]:
    """daphne (forked from this process, so with its settings) accepting at most 1 MB."""
    settings.MAX_REQUEST_MB = SMALL_LIMIT_MB
    settings.MAX_REQUEST_BYTES = SMALL_LIMIT_MB * 1024 * 1024
    server = start_daphne(_asgi_application)
    try:
        yield server.port.value
    finally:
        server.terminate()
        server.join(10)


def _refusal_json(response: bytes) -> str:
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 Content Too Large\r\n"), response[:300]
    assert b"Content-Type: application/json" in head
    detail: str = json.loads(body)["detail"]
    return detail


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_sent(small_limit_port):
    # One byte over: refused from the head, the connection closed by the server unread.
    head = huge_upload_head(b"/api/notes/1/attachments", SMALL_LIMIT_MB * 1024 * 1024 + 1)
    detail = _refusal_json(exchange(small_limit_port, head))
    assert detail == too_large_detail(SMALL_LIMIT_MB)


def test_a_client_that_sends_its_body_anyway_still_reads_the_refusal(small_limit_port):
    """A client that does not wait for an answer before sending its body (most scripts): the
    server drops what arrives rather than closing on unread data (a reset, which would break
    the client's sending and take the answer with it), so the client sends on, then reads the
    413 whole and the end of the stream. 8 MB: more than the sockets' buffers hold."""
    body_start = b"--BoUnDaRy\r\n" + b"x" * (8 * 1024 * 1024)
    head = huge_upload_head(b"/api/notes/1/attachments", 16 * SMALL_LIMIT_MB * 1024 * 1024)
    with socket.create_connection(("127.0.0.1", small_limit_port), timeout=10) as sock:
        sock.sendall(head + body_start)
        detail = _refusal_json(read_all(sock))
    assert detail == too_large_detail(SMALL_LIMIT_MB)


def test_a_chunked_body_is_refused_once_it_passes_the_limit(small_limit_port):
    head = (
        b"POST /api/notes/1/attachments HTTP/1.1\r\nHost: localhost\r\n"
        b"Transfer-Encoding: chunked\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    chunk = b"%x\r\n%s\r\n" % (64 * 1024, b"x" * 64 * 1024)
    over = SMALL_LIMIT_MB * 16 + 1  # 64 KiB chunks: one more than the limit holds
    with socket.create_connection(("127.0.0.1", small_limit_port), timeout=10) as sock:
        sock.sendall(head + chunk * over)  # never the last chunk: only the limit ends it
        detail = _refusal_json(read_all(sock))
    assert detail == too_large_detail(SMALL_LIMIT_MB)


def _post(port: int, url: str, token: str, content_type: str, body: Any) -> tuple[int, Any]:
    """POST `body` (bytes, or an iterable of bytes: sent chunked) with a bearer token."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        chunked = not isinstance(body, bytes)
        conn.request("POST", url, body=body, headers=headers, encode_chunked=chunked)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_an_upload_within_the_limit_is_served(small_limit_port, alice, alice_token):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    text = "# Within the limit\n\n" + "Words of a note that is uploaded whole. " * 2000
    body = (
        '--BoUnDaRy\r\nContent-Disposition: form-data; name="files"; filename="within.md"\r\n'
        f"Content-Type: text/markdown\r\n\r\n{text}\r\n--BoUnDaRy--\r\n"
    ).encode()
    assert 64 * 1024 < len(body) < SMALL_LIMIT_MB * 1024 * 1024
    url = f"/api/notes/{note.pk}/attachments"
    multipart = "multipart/form-data; boundary=BoUnDaRy"
    status, answer = _post(small_limit_port, url, alice_token, multipart, body)
    assert status == 201, answer
    assert len(answer["notes"]) == 1, answer
    assert Note.objects.filter(notebook=note.notebook).count() == 2


def test_a_chunked_body_within_the_limit_is_served(small_limit_port, alice, alice_token):
    """Its chunks reach the application whole and in order, counted on the way."""
    body = json.dumps({"title": "Sent in chunks", "description": "d" * 1500}).encode()
    pieces = [body[i : i + 1000] for i in range(0, len(body), 1000)]
    url, kind = "/api/notebooks", "application/json"
    status, answer = _post(small_limit_port, url, alice_token, kind, pieces)
    assert status == 201, answer
    assert answer["title"] == "Sent in chunks"
    assert answer["description"] == "d" * 1500


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
