"""A local server speaking OpenAI's /v1/audio/transcriptions protocol (multipart upload in,
verbose_json out), for tests of core.transcription.

Each request's multipart form is parsed and recorded (fields, the file's name and bytes, the
Authorization header). Behaviour is scripted: `script`, statuses to answer first (with
`retry_after` as the Retry-After header); `hang`, seconds to wait before answering (the client
times out first); `body`, raw text to answer instead of the segments (junk, no segments).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Upload:
    path: str
    fields: dict[str, list[str]]
    filename: str | None
    audio: bytes
    auth: str | None


@dataclass
class FakeTranscriber:
    segments: list[dict[str, Any]] = field(default_factory=list)
    script: list[int] = field(default_factory=list)
    retry_after: str | None = None
    hang: float = 0.0
    body: str | None = None
    requests: list[Upload] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    url: str = ""


def parse_multipart(
    content_type: str, body: bytes
) -> tuple[dict[str, list[str]], str | None, bytes]:
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    fields: dict[str, list[str]] = {}
    filename, audio = None, b""
    assert isinstance(message, EmailMessage)
    assert message.is_multipart(), "not multipart/form-data"
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        decoded = part.get_payload(decode=True)
        payload = decoded if isinstance(decoded, bytes) else b""
        if part.get_filename() is not None:
            filename, audio = part.get_filename(), payload
        else:
            fields.setdefault(str(name), []).append(payload.decode())
    return fields, filename, audio


@contextmanager
def fake_transcription_server() -> Iterator[FakeTranscriber]:
    state = FakeTranscriber()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
            try:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            fields, filename, audio = parse_multipart(self.headers["Content-Type"], body)
            state.requests.append(
                Upload(self.path, fields, filename, audio, self.headers.get("Authorization"))
            )
            if state.hang:
                state.stop.wait(state.hang)
            status = state.script.pop(0) if state.script else 200
            json_type = {"Content-Type": "application/json"}
            if self.path != "/v1/audio/transcriptions":
                error = {"error": {"message": "not found"}}
                self._send(404, json.dumps(error).encode(), json_type)
            elif status != 200:
                headers = dict(json_type)
                if state.retry_after is not None:
                    headers["Retry-After"] = state.retry_after
                error = {"error": {"message": f"fake {status}", "type": "server_error"}}
                self._send(status, json.dumps(error).encode(), headers)
            elif state.body is not None:
                self._send(200, state.body.encode(), json_type)
            else:
                reply = {
                    "task": "transcribe",
                    "language": fields.get("language", ["english"])[0],
                    "duration": max((s["end"] for s in state.segments), default=0.0),
                    "text": " ".join(s["text"] for s in state.segments),
                    "segments": [
                        {"id": i, "seek": 0, "tokens": [], "temperature": 0.0, **s}
                        for i, s in enumerate(state.segments)
                    ],
                }
                self._send(200, json.dumps(reply).encode(), json_type)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        server.shutdown()
        server.server_close()
