"""daphne, answering requests over Twisted's HTTP/1.1 size limits instead of dropping them.

Twisted's HTTPChannel reads the request line and each header as a line of at most MAX_LENGTH
(16 KiB) and the whole head up to totalHeadersSize (16 KiB) and maxHeaders (500). A longer line
(a long URL, or one huge header) closes the connection without a word; a head too large in
total, or with too many headers, gets a bare 400. Here the first is 414 URI Too Long and the
rest 431 Request Header Fields Too Large, with a short text body, and the connection is closed
as before. The limits themselves stay Twisted's.

The hook is the `protocol` attribute of daphne's HTTPFactory, the factory's own extension point
(Twisted's default builds the same wrapper around a plain HTTPChannel): `install()` before the
server starts. `python -m notebook.daphne_http` takes daphne's command line and does so; it is
what `manage.py serve` runs.
"""

from __future__ import annotations

# First: daphne.server installs the asyncio reactor, which must happen before Twisted loads.
import daphne.server  # noqa: F401  # isort: skip

import logging
from typing import Any

from daphne.http_protocol import HTTPFactory
from twisted.web.http import HTTPChannel, _GenericHTTPChannelProtocol

logger = logging.getLogger("notebook.daphne_http")  # also when run as __main__

_REASONS = {414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


class LimitedHTTPChannel(HTTPChannel):
    """HTTPChannel that says 414 or 431 where Twisted would drop the connection or say 400.
    Relies on HTTPChannel counting the current request's head in `_receivedHeaderSize` and
    `_receivedHeaderCount` (both 0 until its request line arrives); tests/test_daphne_http.py
    checks that against the installed Twisted."""

    def lineLengthExceeded(self, line: bytes) -> None:
        # Nothing of this request counted yet: the over-long line is its request line.
        if self._receivedHeaderSize == 0:
            self._refuse(414, f"The request line is longer than {self.MAX_LENGTH:,} bytes.")
        else:
            self._refuse(431, f"A request header is longer than {self.MAX_LENGTH:,} bytes.")

    def lineReceived(self, line: bytes) -> None:
        if self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            self._refuse(431, f"The request headers exceed {self.totalHeadersSize:,} bytes.")
            return
        super().lineReceived(line)  # type: ignore[no-untyped-call]

    def headerReceived(self, line: bytes) -> bool:
        if self._receivedHeaderCount >= self.maxHeaders:
            self._refuse(431, f"The request has more than {self.maxHeaders:,} headers.")
            return False
        accepted: bool = super().headerReceived(line)  # type: ignore[no-untyped-call]
        return accepted

    def _refuse(self, status: int, message: str) -> None:
        transport: Any = self.transport  # (zope interfaces: mypy sees the methods unbound)
        logger.warning(
            "HTTP %d to %s: %s", status, getattr(transport.getPeer(), "host", "?"), message
        )
        body = message.encode() + b"\n"
        head = (
            b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n"
        ) % (status, _REASONS[status], len(body))
        transport.write(head + body)
        self.loseConnection()  # type: ignore[no-untyped-call]


def _limited_protocol(factory: HTTPFactory) -> _GenericHTTPChannelProtocol:
    return _GenericHTTPChannelProtocol(LimitedHTTPChannel())  # type: ignore[no-untyped-call]


def install() -> None:
    """From now on, daphne's servers in this process speak HTTP/1.1 through
    LimitedHTTPChannel (daphne then sets its own request class on the channel, as before)."""
    HTTPFactory.protocol = _limited_protocol


def main() -> None:
    install()
    # after install(): daphne's CLI imports Twisted's reactor, which install() chooses
    from daphne.cli import CommandLineInterface

    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
