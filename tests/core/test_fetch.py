"""core.fetch against real HTTP(S) servers on this machine, each trying one trick.

The servers listen on 127.0.0.1. Name resolution is the one thing outside the machine, so a
test injects a resolver; where a test must show which address was dialled, it records
`socket.create_connection` and routes the socket to the local server.
"""

from __future__ import annotations

import datetime
import gzip
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from core import fetch as fetch_module
from core.fetch import FetchRefused, fetch

PUBLIC = "93.184.215.14"  # a global unicast address; nothing is ever sent to it
PAGE = b"<html><body><p>Hello from the page.</p></body></html>"
MB = 1024 * 1024
GZIP_BOMB = gzip.compress(b"\0" * (40 * MB))


@dataclass
class Server:
    port: int
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def url(self, path: str, host: str = "localhost") -> str:
        return f"http://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str = "text/html") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _redirect(self, location: str, *extra: tuple[str, str]) -> None:
            self.send_response(302)
            self.send_header("Location", location)
            for name, value in extra:
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            server.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            path, _, query = self.path.partition("?")
            if path == "/page":
                self._send(200, PAGE, "text/html; charset=UTF-8")
            elif path == "/to":
                self._redirect(query)
            elif path.startswith("/chain/"):
                left = int(path.rsplit("/", 1)[1])
                if left:
                    self._redirect(f"/chain/{left - 1}")
                else:
                    self._send(200, PAGE)
            elif path == "/cookie":
                self._redirect("/page", ("Set-Cookie", "session=secret; Path=/"))
            elif path == "/pdf":
                self._send(200, b"%PDF-1.7", "application/pdf")
            elif path == "/missing":
                self._send(404, b"no")
            elif path == "/gzip":
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Encoding", "gzip")
                body = gzip.compress(PAGE) if query != "bomb" else GZIP_BOMB
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif path == "/garbage":
                self.wfile.write(b"SPEAKING NO HTTP AT ALL\r\n\r\n")
                self.close_connection = True
            elif path == "/hang-up":
                self.close_connection = True  # closes without a byte
            elif path == "/bad-gzip":
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", "20")
                self.end_headers()
                self.wfile.write(b"this is not gzip....")
            elif path == "/brotli":
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Encoding", "br")
                self.send_header("Content-Length", "4")
                self.end_headers()
                self.wfile.write(b"\x0b\x02\x80\x03")
            elif path == "/declared-huge":
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(50 * MB))
                self.end_headers()
                self.wfile.write(b"<html>")
            elif path == "/endless":
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()  # no length: the body ends when the connection does
                self._trickle(b"<p>more</p>" * 1000, pause=0.0)
            elif path == "/slow-body":
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self._trickle(b"x", pause=0.2)
            elif path == "/slow-headers":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n")
                self._trickle(b"X", pause=0.2, prefix=b"X-Slow: ")
            else:
                self._send(404, b"no route")

        def _trickle(self, chunk: bytes, *, pause: float, prefix: bytes = b"") -> None:
            # Until the client hangs up, or 30 s (so a broken fetch fails the test, not CI).
            stop = time.monotonic() + 30
            try:
                self.wfile.write(prefix)
                while time.monotonic() < stop:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    if pause:
                        time.sleep(pause)
            except OSError:
                return
            self.close_connection = True

    return Handler


def _serve(tls: ssl.SSLContext | None = None) -> Iterator[Server]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server = Server(port=httpd.server_address[1])
    httpd.RequestHandlerClass = _handler(server)
    httpd.daemon_threads = True
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def server(settings: Any) -> Iterator[Server]:
    for running in _serve():
        settings.FETCH_ALLOWED_HOSTS = [f"localhost:{running.port}"]
        yield running


@pytest.fixture
def dialled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every address a connection is opened to; the socket actually goes to 127.0.0.1."""
    calls: list[tuple[str, int]] = []
    original = socket.create_connection

    def record(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        calls.append(address)
        return original(("127.0.0.1", address[1]), *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", record)
    return calls


def resolver(table: dict[str, list[str]]) -> Any:
    def resolve(host: str, port: int) -> list[str]:
        return table[host]

    return resolve


def refusal(url: str, **kwargs: Any) -> str:
    with pytest.raises(FetchRefused) as caught:
        fetch(url, **kwargs)
    return str(caught.value)


def test_an_allowed_host_returns_the_page_with_its_type_and_charset(server: Server) -> None:
    page = fetch(server.url("/page"))
    assert page.body == PAGE
    assert (page.status, page.content_type, page.charset) == (200, "text/html", "utf-8")
    assert page.url == server.url("/page")
    _, headers = server.requests[0]
    assert headers["user-agent"] == "Notebook/1 (+self-hosted)"
    assert headers["host"] == f"localhost:{server.port}"
    assert "cookie" not in headers
    assert "authorization" not in headers


def test_an_allowed_host_is_allowed_on_its_port_only(server: Server, settings: Any) -> None:
    settings.FETCH_ALLOWED_HOSTS = [f"localhost:{server.port + 1}"]
    assert "this machine itself" in refusal(server.url("/page"))
    settings.FETCH_ALLOWED_HOSTS = ["LOCALHOST"]  # a bare name: any port
    assert fetch(server.url("/page")).body == PAGE


def test_loopback_is_refused_without_a_request(server: Server) -> None:
    assert "this machine itself" in refusal(server.url("/page", host="127.0.0.1"))
    assert "this machine itself" in refusal(f"http://[::1]:{server.port}/page")
    assert server.requests == []


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("http://127.0.0.1:{port}/page", "this machine itself"),
        ("http://[::1]:{port}/page", "this machine itself"),
        ("http://169.254.169.254/latest/meta-data/", "link-local network"),
        ("http://[::ffff:169.254.169.254]/", "link-local network"),
        ("http://intranet.example/", "private network"),
        ("http://0.0.0.0:{port}/page", "not a public internet address"),
        ("ftp://files.example/secret", "Only http:// and https://"),
        ("file:///etc/passwd", "Only http:// and https://"),
        ("http://user:pw@localhost:{port}/page", "user name or password"),
    ],
)
def test_a_redirect_is_checked_from_scratch(server: Server, location: str, message: str) -> None:
    table = {"localhost": ["127.0.0.1"], "intranet.example": ["10.1.2.3"]}
    url = server.url("/to?" + location.format(port=server.port))
    assert message in refusal(url, resolver=resolver(table))
    assert server.paths() == [url.split(str(server.port), 1)[1]]


def test_a_name_resolving_to_a_private_address_is_refused(dialled: list[tuple[str, int]]) -> None:
    message = refusal(
        "http://intranet.example/", resolver=resolver({"intranet.example": ["10.0.0.5"]})
    )
    assert message.startswith("That address is on a private network")
    assert dialled == []


def test_every_address_of_a_name_is_checked(dialled: list[tuple[str, int]]) -> None:
    table = {"mixed.example": [PUBLIC, "10.0.0.5"]}
    assert "private network" in refusal("http://mixed.example/", resolver=resolver(table))
    table = {"mixed.example": [PUBLIC, "fe80::1%eth0"]}
    assert "link-local" in refusal("http://mixed.example/", resolver=resolver(table))
    assert dialled == []


def test_private_addresses_can_be_allowed_but_never_loopback(
    server: Server, settings: Any, dialled: list[tuple[str, int]]
) -> None:
    settings.FETCH_PRIVATE_ADDRESSES = True
    table = {"wiki.intranet": ["10.0.0.5"], "self.intranet": ["127.0.0.1"]}
    page = fetch(f"http://wiki.intranet:{server.port}/page", resolver=resolver(table))
    assert page.body == PAGE
    assert dialled == [("10.0.0.5", server.port)]
    assert "this machine itself" in refusal(
        f"http://self.intranet:{server.port}/page", resolver=resolver(table)
    )


def test_the_connection_goes_to_the_vetted_address_not_a_rebound_one(
    server: Server, dialled: list[tuple[str, int]]
) -> None:
    # A rebinding DNS server answers a public address first, then 127.0.0.1.
    answers = [[PUBLIC], ["127.0.0.1"]]
    lookups: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        lookups.append(host)
        return answers[min(len(lookups) - 1, 1)]

    page = fetch(f"http://rebind.example:{server.port}/page", resolver=rebinding)
    assert page.body == PAGE
    assert lookups == ["rebind.example"]  # looked up once, before checking
    assert dialled == [(PUBLIC, server.port)]  # and that checked address is the one dialled
    assert server.requests[0][1]["host"] == f"rebind.example:{server.port}"


def test_five_redirects_are_followed_and_a_sixth_is_refused(server: Server) -> None:
    assert fetch(server.url("/chain/5")).url == server.url("/chain/0")
    server.requests.clear()
    assert "redirects more than 5 times" in refusal(server.url("/chain/6"))
    assert server.paths() == [f"/chain/{n}" for n in range(6, 0, -1)]


def test_no_proxy_is_taken_from_the_environment(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for proxy in _serve():
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert fetch(server.url("/page")).body == PAGE
        assert proxy.requests == []


def test_cookies_a_server_sets_are_not_sent_back(server: Server) -> None:
    assert fetch(server.url("/cookie")).body == PAGE
    assert [path for path, _ in server.requests] == ["/cookie", "/page"]
    assert "cookie" not in server.requests[1][1]


def test_an_endless_body_is_cut_at_the_cap(server: Server) -> None:
    assert refusal(server.url("/endless"), max_bytes=MB) == (
        "The page is larger than 1 MB; Notebook reads pages up to that size."
    )


def test_a_declared_length_over_the_cap_is_refused_before_reading(server: Server) -> None:
    assert "larger than 10 MB" in refusal(server.url("/declared-huge"))


def test_a_gzip_body_is_decoded_and_a_gzip_bomb_cut_at_the_cap(server: Server) -> None:
    assert fetch(server.url("/gzip")).body == PAGE
    assert "larger than 1 MB" in refusal(server.url("/gzip?bomb"), max_bytes=MB)


@pytest.mark.parametrize("path", ["/slow-body", "/slow-headers"])
def test_a_server_trickling_bytes_fails_at_the_deadline(server: Server, path: str) -> None:
    started = time.monotonic()
    message = refusal(server.url(path), timeout=1.5)
    assert message == "The server took longer than 1.5 s to send the page."
    # Each read gets a byte within 0.2 s; only a deadline for the whole fetch ends it.
    assert time.monotonic() - started < 10


def test_a_wrong_content_type_is_refused(server: Server) -> None:
    message = refusal(server.url("/pdf"))
    assert message.startswith("The server sent application/pdf; Notebook reads")
    assert fetch(server.url("/pdf"), accept=("application/*",)).body == b"%PDF-1.7"


def test_an_error_status_is_refused_with_it(server: Server) -> None:
    assert refusal(server.url("/missing")) == "The server answered 404 Not Found for that page."


@pytest.mark.parametrize("path", ["/garbage", "/hang-up", "/bad-gzip"])
def test_a_server_speaking_nonsense_is_refused(server: Server, path: str) -> None:
    assert refusal(server.url(path)) == (
        "The server at localhost did not answer in a way Notebook can read."
    )


def test_an_encoding_notebook_cannot_decode_is_refused(server: Server) -> None:
    assert refusal(server.url("/brotli")) == (
        "The server compressed the page as br, which Notebook cannot read."
    )


def test_a_closed_port_is_refused(server: Server, settings: Any) -> None:
    with socket.socket() as probe:  # a port nobody listens on: bound, never listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        settings.FETCH_ALLOWED_HOSTS = [f"localhost:{port}"]
        assert refusal(f"http://localhost:{port}/") == "Could not connect to localhost."


def test_userinfo_in_the_url_is_refused_without_a_request(server: Server) -> None:
    message = refusal(f"http://user:secret@localhost:{server.port}/page")
    assert message == "Addresses with a user name or password in them are not fetched."
    assert server.requests == []


def test_a_name_that_does_not_resolve_is_refused() -> None:
    def failing(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    assert refusal("https://nowhere.example/", resolver=failing) == (
        "Could not find the server nowhere.example."
    )


def test_a_garbage_url_is_refused() -> None:
    assert refusal("http://exa mple.com:99999/") == "That is not a web address Notebook can read."


# TLS: the socket goes to the vetted address, the certificate is checked against the name.


@pytest.fixture
def tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test CA")])
    now = datetime.datetime.now(datetime.UTC)
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "secure.example")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("secure.example")]), False)
        .sign(ca_key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    client_context = ssl.create_default_context(
        cadata=ca.public_bytes(serialization.Encoding.PEM).decode()
    )
    monkeypatch.setattr(fetch_module, "_ssl_context", lambda: client_context)
    yield from _serve(tls=server_context)


def test_https_dials_the_vetted_address_and_verifies_the_name(
    tls_server: Server, dialled: list[tuple[str, int]]
) -> None:
    table = {"secure.example": [PUBLIC], "other.example": [PUBLIC]}
    page = fetch(f"https://secure.example:{tls_server.port}/page", resolver=resolver(table))
    assert page.body == PAGE
    assert dialled == [(PUBLIC, tls_server.port)]
    # Same server, same address, but a name its certificate does not carry: refused.
    message = refusal(f"https://other.example:{tls_server.port}/page", resolver=resolver(table))
    assert message == "The server's certificate is not valid for other.example."
    assert len(tls_server.requests) == 1


def test_the_default_tls_context_verifies_certificates_and_names() -> None:
    context = fetch_module._ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
