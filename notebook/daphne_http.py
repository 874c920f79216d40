"""daphne, answering requests over Twisted's HTTP/1.1 size limits instead of dropping them, and
refusing a body larger than any we accept before reading it.

Twisted's HTTPChannel reads the request line and each header as a line of at most MAX_LENGTH
(16 KiB) and the whole head up to totalHeadersSize (16 KiB) and maxHeaders (500). A longer line
(a long URL, or one huge header) closes the connection without a word; a head too large in
total, or with too many headers, gets a bare 400. Here the first is 414 URI Too Long and the
rest 431 Request Header Fields Too Large, with a short text body. The limits stay Twisted's.

Twisted also reads a request's whole body (into memory or a temporary file) before daphne
hands the request to Django, so an upload over MAX_UPLOAD_MB was refused only after all of it
had arrived. Here a request whose Content-Length exceeds MAX_REQUEST_BYTES (the largest
legitimate upload) gets 413 Content Too Large as soon as its headers are in, and a chunked
body as soon as what arrived passes the limit: JSON `{"detail": …}` under /api/, like the
API's other errors, else text.

After a refusal the answer is sent and our side of the connection shut (the client reads it
to its end), then whatever the client still sends is dropped unread for up to LINGER_SECONDS
before the connection is aborted: closing a socket that holds unread data makes the kernel
send a reset, which would often destroy the answer before a client still sending its body
has read it (nginx's lingering close, for the same reason).

The hook is the `protocol` attribute of daphne's HTTPFactory, the factory's own extension point
(Twisted's default builds the same wrapper around a plain HTTPChannel): `install()` before the
server starts. `python -m notebook.daphne_http` takes daphne's command line and does so; it is
what `manage.py serve` runs.
"""

from __future__ import annotations

# First: daphne.server installs the asyncio reactor, which must happen before Twisted loads.
import daphne.server  # noqa: F401  # isort: skip

import json
import logging
from typing import Any

from daphne.http_protocol import HTTPFactory
from django.conf import settings
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web.http import HTTPChannel, _ChunkedTransferDecoder, _GenericHTTPChannelProtocol

logger = logging.getLogger("notebook.daphne_http")  # also when run as __main__

_REASONS = {
    413: b"Content Too Large",
    414: b"URI Too Long",
    431: b"Request Header Fields Too Large",
}
# How long a refused client may go on sending (dropped unread) before the connection is cut.
LINGER_SECONDS = 5.0


def _too_large_message(limit: int) -> str:
    return (
        f"The request body is too large: this server accepts at most "
        f"{limit / (1024 * 1024):,.0f} MB in one request (MAX_REQUEST_MB)."
    )


class LimitedHTTPChannel(HTTPChannel):
    """HTTPChannel that says 414 or 431 where Twisted would drop the connection or say 400,
    and 413 to a body over MAX_REQUEST_BYTES before reading it. Relies on HTTPChannel counting
    the current request's head in `_receivedHeaderSize` and `_receivedHeaderCount` (both 0
    until its request line arrives), keeping the request line's path in `_path`, the declared
    length in `length` (None when chunked) and the body's decoder in `_transferDecoder`;
    tests/test_daphne_http.py checks that against the installed Twisted."""

    _refused = False  # answered with a refusal: the rest of the connection is dropped
    _linger: Any = None  # the delayed call that aborts a refused connection
    _chunked_received = 0  # bytes of the current chunked body so far

    def dataReceived(self, data: bytes) -> None:
        if self._refused:
            return  # lingering: dropped unread (and without resetting the idle timeout)
        super().dataReceived(data)  # type: ignore[no-untyped-call]

    def rawDataReceived(self, data: bytes) -> None:
        if self._refused:
            return  # the rest of the data the refused request arrived with
        super().rawDataReceived(data)

    def allHeadersReceived(self) -> None:
        limit: int = settings.MAX_REQUEST_BYTES
        if self.length is not None and self.length > limit:
            # Before HTTPChannel opens the body's file or says 100 Continue.
            self._refuse(413, _too_large_message(limit))
            return
        if self.length is None and isinstance(self._transferDecoder, _ChunkedTransferDecoder):
            # The same decoder, its chunks counted on their way to the request.
            self._chunked_received = 0
            self._transferDecoder = _ChunkedTransferDecoder(
                self._chunk_received, self._chunked_body_finished
            )
        super().allHeadersReceived()  # type: ignore[no-untyped-call]

    def _chunk_received(self, data: bytes) -> None:
        if self._refused:
            return  # more chunks in the same read as the one over the limit
        self._chunked_received += len(data)
        limit: int = settings.MAX_REQUEST_BYTES
        if self._chunked_received > limit:
            self._refuse(413, _too_large_message(limit))
            return
        self.requests[-1].handleContentChunk(data)

    def _chunked_body_finished(self, rest: bytes) -> None:
        if not self._refused:  # a refused request never reaches the application
            self._finishRequestBody(rest)  # type: ignore[no-untyped-call]

    def lineLengthExceeded(self, line: bytes) -> None:
        # Nothing of this request counted yet: the over-long line is its request line.
        if self._receivedHeaderSize == 0:
            self._refuse(414, f"The request line is longer than {self.MAX_LENGTH:,} bytes.")
        else:
            self._refuse(431, f"A request header is longer than {self.MAX_LENGTH:,} bytes.")

    def lineReceived(self, line: bytes) -> None:
        if self._refused:
            return  # lines after a refused one, in the same read
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

    def _respondToBadRequestAndDisconnect(self) -> None:
        if not self._refused:  # (the chunk decoder may still find fault in dropped data)
            super()._respondToBadRequestAndDisconnect()  # type: ignore[no-untyped-call]

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._linger is not None and self._linger.active():
            self._linger.cancel()  # the client closed first
        super().connectionLost(reason)  # type: ignore[no-untyped-call]

    def _refuse(self, status: int, message: str) -> None:
        if self._refused:
            return
        self._refused = True
        transport: Any = self.transport  # (zope interfaces: mypy sees the methods unbound)
        logger.warning(
            "HTTP %d to %s: %s", status, getattr(transport.getPeer(), "host", "?"), message
        )
        path = getattr(self, "_path", b"")  # (unset before the request line is parsed)
        if status == 413 and path.split(b"?")[0].startswith(b"/api/"):
            content_type = b"application/json"
            body = json.dumps({"detail": message}).encode()
        else:
            content_type = b"text/plain; charset=utf-8"
            body = message.encode() + b"\n"
        head = (
            b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
        ) % (status, _REASONS[status], content_type, len(body))
        transport.write(head + body)
        self._networkProducer.unregisterProducer()  # as HTTPChannel.loseConnection does
        half_close = getattr(transport, "loseWriteConnection", None)
        if half_close is None:
            transport.loseConnection()
            return
        half_close()  # FIN once the answer is out; reading goes on (and drops)
        self.setTimeout(None)  # type: ignore[no-untyped-call]
        self._linger = self.callLater(  # type: ignore[no-untyped-call]
            LINGER_SECONDS, transport.abortConnection
        )


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
