"""Fetching a URL a user typed, safely (SSRF): the one way Notebook reads the web (#35).

`fetch` refuses, with `FetchRefused` and a message for the user, anything a URL or a remote
server can do to reach what it should not or to hold a worker:

- only http and https, no user name or password in the URL; any port;
- every address the host name resolves to must be public: loopback, private (RFC 1918,
  fc00::/7), shared (CGNAT 100.64/10), link-local (169.254/16, fe80::/10: cloud metadata),
  multicast, reserved and unspecified addresses are refused, also when embedded in an IPv6
  address (IPv4-mapped, 6to4, Teredo, NAT64). `FETCH_PRIVATE_ADDRESSES` lets private and shared
  ones through (an intranet); loopback and link-local stay refused. Host names listed in
  `FETCH_ALLOWED_HOSTS` ("name" for any port, "name:port" for one) skip the address check;
- the connection goes to the address that was checked, never to the name resolved again (no
  DNS-rebinding window), while the Host header, TLS SNI and certificate check use the name;
- redirects are followed here, at most `MAX_REDIRECTS`, each new URL checked from scratch;
- one deadline for the whole fetch (every hop, connect, TLS, headers and body), a byte cap
  while streaming, the Content-Type checked against what the caller accepts;
- no cookies, no credentials, no proxy from the environment, no HTTP/2.

Name resolution itself (getaddrinfo) is not bounded by the deadline; the system resolver's own
timeout applies.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import ssl
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from http import HTTPStatus
from typing import Any

import certifi
import httpcore2
import httpx2
from django.conf import settings
from django.utils.translation import gettext

USER_AGENT = "Notebook/1 (+self-hosted)"
MAX_REDIRECTS = 5
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_TIMEOUT = 20.0
HTML_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
# A DNS name after IDNA encoding: letters, digits, hyphens and underscores in dotted labels.
_HOST_NAME = re.compile(
    r"(?i)(?=.{1,253}\.?$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*"
    r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.?"
)
_REDIRECTS = (301, 302, 303, 307, 308)
_READ_SIZE = 64 * 1024

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]


def _networks(*cidrs: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


# Spelled out rather than left to `ipaddress` alone, whose lists change between Python versions.
_LOOPBACK = _networks("127.0.0.0/8", "::1/128")
_LINK_LOCAL = _networks("169.254.0.0/16", "fe80::/10")
_PRIVATE = _networks("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
_NOT_PUBLIC = _networks(
    "0.0.0.0/8", "224.0.0.0/4", "240.0.0.0/4", "::/128", "fec0::/10", "ff00::/8"
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class FetchRefused(Exception):
    """The URL was not fetched; the message says why, for the user."""


@dataclass(frozen=True)
class Fetched:
    url: str  # after redirects
    status: int
    content_type: str  # the media type, lower case, without parameters
    charset: str | None
    body: bytes  # decoded from gzip/deflate when the server sent it so
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "


def fetch(
    url: str,
    *,
    max_bytes: int | None = None,
    timeout: float | None = None,
    accept: Collection[str] = HTML_TYPES,
    resolver: Resolver | None = None,
) -> Fetched:
    """GET `url` under the rules above; raises only `FetchRefused` for anything the URL or the
    remote side causes. `accept` holds media types ("text/html") or "type/*"."""
    max_bytes = max_bytes or int(getattr(settings, "FETCH_MAX_BYTES", DEFAULT_MAX_BYTES))
    timeout = timeout or float(getattr(settings, "FETCH_TIMEOUT", DEFAULT_TIMEOUT))
    deadline = time.monotonic() + timeout
    current = _parse(url)
    for _hop in range(MAX_REDIRECTS + 1):
        addresses = _vetted_addresses(current, resolver or _system_resolver)
        try:
            outcome = _get(
                current, addresses, deadline=deadline, max_bytes=max_bytes, accept=accept
            )
        except httpcore2.TimeoutException as exc:
            raise FetchRefused(_too_slow(timeout)) from exc
        except (httpcore2.ConnectError, OSError) as exc:
            if _caused_by(exc, ssl.SSLCertVerificationError):
                raise FetchRefused(
                    gettext("The server's certificate is not valid for %(host)s.")
                    % {"host": current.host}
                ) from exc
            raise FetchRefused(
                gettext("Could not connect to %(host)s.") % {"host": current.host}
            ) from exc
        except (httpcore2.ProtocolError, httpcore2.NetworkError, ValueError, zlib.error) as exc:
            raise FetchRefused(
                gettext("The server at %(host)s did not answer in a way Notebook can read.")
                % {"host": current.host}
            ) from exc
        if isinstance(outcome, Fetched):
            return outcome
        current = outcome
    raise FetchRefused(
        gettext("The page redirects more than %(count)d times; Notebook stopped following it.")
        % {"count": MAX_REDIRECTS}
    )


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = exc
    for _depth in range(8):  # a chain can loop; httpcore2 wraps once or twice
        if seen is None:
            break
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _too_slow(timeout: float) -> str:
    return gettext("The server took longer than %(seconds)s s to send the page.") % {
        "seconds": f"{timeout:g}"
    }


def _parse(url: str, base: httpx2.URL | None = None) -> httpx2.URL:
    try:
        parsed = base.join(url) if base is not None else httpx2.URL(url.strip())
    except (httpx2.InvalidURL, ValueError, TypeError) as exc:
        raise FetchRefused(gettext("That is not a web address Notebook can read.")) from exc
    if parsed.scheme not in ("http", "https"):
        raise FetchRefused(
            gettext("Only http:// and https:// addresses can be fetched, not “%(scheme)s:”.")
            % {"scheme": parsed.scheme or "?"}
        )
    if parsed.userinfo:
        raise FetchRefused(
            gettext("Addresses with a user name or password in them are not fetched.")
        )
    if not parsed.host:
        raise FetchRefused(gettext("That web address names no server."))
    if not (_is_ip(parsed.host) or _HOST_NAME.fullmatch(parsed.raw_host.decode("ascii"))) or (
        parsed.port is not None and not 0 < parsed.port < 65536
    ):
        raise FetchRefused(gettext("That is not a web address Notebook can read."))
    return parsed


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _port(url: httpx2.URL) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


def _host_allowed(url: httpx2.URL) -> bool:
    host = url.host.lower().rstrip(".")
    port = _port(url)
    for entry in getattr(settings, "FETCH_ALLOWED_HOSTS", ()):
        name, _, entry_port = str(entry).lower().rpartition(":")
        if not name or not entry_port.isdigit():  # "name" alone, or an IPv6 literal without port
            name, entry_port = str(entry).lower(), ""
        if name.strip("[]").rstrip(".") == host and (not entry_port or int(entry_port) == port):
            return True
    return False


def _system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _vetted_addresses(url: httpx2.URL, resolver: Resolver) -> list[str]:
    """Every address of the host, each checked; the connection goes to these only."""
    host, port = url.host, _port(url)
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        answers: Sequence[str] = [host]
    else:
        try:
            answers = resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise FetchRefused(
                gettext("Could not find the server %(host)s.") % {"host": host}
            ) from exc
    addresses: list[str] = []
    for answer in answers:
        try:
            address = ipaddress.ip_address(str(answer).split("%", 1)[0])
        except ValueError as exc:
            raise FetchRefused(
                gettext("Could not find the server %(host)s.") % {"host": host}
            ) from exc
        if not _host_allowed(url):
            refusal = address_refusal(address)
            if refusal:
                raise FetchRefused(refusal)
        if str(address) not in addresses:
            addresses.append(str(address))
    if not addresses:
        raise FetchRefused(gettext("Could not find the server %(host)s.") % {"host": host})
    return addresses


def address_refusal(address: IPAddress) -> str | None:
    """Why Notebook will not connect to `address`, or None when it may."""
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv6 address that carries an IPv4 one reaches that IPv4 host.
        if address.ipv4_mapped is not None:
            candidates = [address.ipv4_mapped]
        if address.sixtofour is not None:
            candidates.append(address.sixtofour)
        if address.teredo is not None:
            candidates.extend(address.teredo)
        if address in _NAT64:
            candidates.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    allow_private = bool(getattr(settings, "FETCH_PRIVATE_ADDRESSES", False))
    for candidate in candidates:
        if candidate.is_loopback or _within(candidate, _LOOPBACK):
            return gettext("That address is this machine itself; Notebook does not fetch it.")
        if candidate.is_link_local or _within(candidate, _LINK_LOCAL):
            return gettext(
                "That address is on a link-local network (where cloud metadata services "
                "answer); Notebook does not fetch it."
            )
        if _within(candidate, _PRIVATE):
            if allow_private:
                continue
            return gettext(
                "That address is on a private network; Notebook fetches only public web "
                "pages (an administrator can allow private addresses)."
            )
        if (
            candidate.is_multicast
            or candidate.is_unspecified
            or candidate.is_reserved
            or _within(candidate, _NOT_PUBLIC)
            or not candidate.is_global
        ):
            return gettext("That is not a public internet address; Notebook does not fetch it.")
    return None


def _within(
    address: IPAddress, networks: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]
) -> bool:
    return any(address.version == n.version and address in n for n in networks)


@cache
def _ssl_context() -> ssl.SSLContext:
    # Certificates verified against certifi's roots, the host name checked (the default).
    return ssl.create_default_context(cafile=certifi.where())


def _get(
    url: httpx2.URL,
    addresses: list[str],
    *,
    deadline: float,
    max_bytes: int,
    accept: Collection[str],
) -> Fetched | httpx2.URL:
    """One GET over a connection to the vetted addresses: the page, or where it redirects."""
    left = max(deadline - time.monotonic(), 0.001)
    request_headers = [
        (b"User-Agent", USER_AGENT.encode()),
        (b"Accept", ", ".join([*accept, "*/*;q=0.1"]).encode()),
        (b"Accept-Encoding", b"gzip, deflate"),
        (b"Connection", b"close"),
    ]
    target = httpcore2.URL(
        scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
    )
    backend = _PinnedBackend(url.raw_host.decode("ascii"), addresses, deadline)
    # A pool of one connection per hop, built here: httpcore2 keeps no cookies, reads no
    # proxy variables and sends only these headers (plus Host, from the URL: the name).
    with (
        httpcore2.ConnectionPool(
            ssl_context=_ssl_context(),
            network_backend=backend,
            max_connections=1,
            http1=True,
            http2=False,
            retries=0,
        ) as pool,
        pool.stream(
            b"GET",
            target,
            headers=request_headers,
            extensions={"timeout": {"connect": left, "read": left, "write": left, "pool": left}},
        ) as response,
    ):
        headers = _headers(response.headers)
        if response.status in _REDIRECTS:
            location = headers.get("location", "")
            if not location:
                raise FetchRefused(gettext("The server redirected to no address."))
            return _parse(location, base=url)
        if not 200 <= response.status < 300:
            raise FetchRefused(
                gettext("The server answered %(status)d %(reason)s for that page.")
                % {"status": response.status, "reason": _reason(response.status)}
            )
        content_type, charset = _content_type(headers.get("content-type", ""), accept)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise FetchRefused(_too_large(max_bytes))
        body = _read_capped(
            response.iter_stream(),
            encoding=headers.get("content-encoding", "").strip().lower(),
            max_bytes=max_bytes,
            deadline=deadline,
        )
    return Fetched(
        url=str(url),
        status=response.status,
        content_type=content_type,
        charset=charset,
        body=body,
        headers=headers,
    )


def _headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _content_type(header: str, accept: Collection[str]) -> tuple[str, str | None]:
    media_type, _, parameters = header.partition(";")
    media_type = media_type.strip().lower()
    wanted = {a.lower() for a in accept}
    if not media_type:
        raise FetchRefused(gettext("The server did not say what kind of document it sent."))
    if media_type not in wanted and f"{media_type.split('/', 1)[0]}/*" not in wanted:
        raise FetchRefused(
            gettext("The server sent %(type)s; Notebook reads %(accepted)s here.")
            % {"type": media_type, "accepted": ", ".join(sorted(wanted))}
        )
    charset = None
    for parameter in parameters.split(";"):
        key, _, value = parameter.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'").lower()
    return media_type, charset


def _too_large(max_bytes: int) -> str:
    return gettext("The page is larger than %(size)s MB; Notebook reads pages up to that size.") % {
        "size": f"{max_bytes / (1024 * 1024):g}"
    }


def _read_capped(
    chunks: Iterable[bytes], *, encoding: str, max_bytes: int, deadline: float
) -> bytes:
    """The body, decompressed, refused as soon as it passes `max_bytes` or the deadline."""
    decoder: Any = None
    if encoding in ("gzip", "x-gzip"):
        decoder = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        decoder = zlib.decompressobj()
    elif encoding not in ("", "identity"):
        raise FetchRefused(
            gettext("The server compressed the page as %(encoding)s, which Notebook cannot read.")
            % {"encoding": encoding}
        )
    body = bytearray()
    received = 0
    for chunk in chunks:
        received += len(chunk)
        # A bounded decompress: a small gzip bomb never grows past the cap in memory.
        data = decoder.decompress(chunk, max_bytes + 1 - len(body)) if decoder else chunk
        body += data
        if len(body) > max_bytes or received > max_bytes:
            raise FetchRefused(_too_large(max_bytes))
        if time.monotonic() > deadline:
            raise httpcore2.ReadTimeout("deadline passed")
    return bytes(body)


class _DeadlineStream(httpcore2.NetworkStream):
    """A connection whose every read, write and TLS handshake ends by the one deadline, so a
    server that trickles a byte a second (headers or body) fails at the deadline."""

    def __init__(self, inner: httpcore2.NetworkStream, deadline: float) -> None:
        self._inner = inner
        self._deadline = deadline

    def _left(self, timeout: float | None) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise httpcore2.ReadTimeout("deadline passed")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        # httpcore passes the URL's host name: SNI and the certificate check use the name.
        tls = self._inner.start_tls(ssl_context, server_hostname, self._left(timeout))
        return _DeadlineStream(tls, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _PinnedBackend(httpcore2.NetworkBackend):
    """Dials the vetted addresses instead of resolving the host name again.

    httpcore2's ConnectionPool asks its network backend to `connect_tcp(host, port)` with the
    URL's host name and then upgrades the stream with `start_tls(server_hostname=host)`. This
    backend answers the first with a socket to an address checked by `_vetted_addresses` (an IP
    literal, so `socket.create_connection` does no lookup), leaving TLS to verify the
    certificate against the name. There is no second lookup for a rebinding DNS server to
    answer differently.
    """

    def __init__(self, host: str, addresses: list[str], deadline: float) -> None:
        self._host = host
        self._addresses = addresses
        self._deadline = deadline
        self._inner = httpcore2.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        if host != self._host:
            raise httpcore2.ConnectError(f"asked for {host!r}, pinned to {self._host!r}")
        failure: Exception = httpcore2.ConnectError("no address")
        for address in self._addresses:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise httpcore2.ConnectTimeout("deadline passed")
            try:
                stream = self._inner.connect_tcp(
                    address,
                    port,
                    timeout=left if timeout is None else min(timeout, left),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
                continue
            return _DeadlineStream(stream, self._deadline)
        raise failure
