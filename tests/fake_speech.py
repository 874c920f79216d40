"""A local server speaking OpenAI's /v1/audio/speech protocol (JSON in: model, voice, input,
response_format; audio bytes out), for tests of core.speech and Studio's audio overviews.

It answers a WAV of a tone (a pitch per voice) lasting `seconds_per_char` per character of
the input, and records each request (its JSON and Authorization header). Behaviour is
scripted: `script`, statuses to answer first (with `retry_after` as the Retry-After header);
`hang`, seconds to wait before each answer; `body`, bytes to answer instead of audio (junk).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import soundfile

RATE = 24000
PITCH = {"alloy": 220.0, "echo": 330.0}


@dataclass
class FakeSpeaker:
    seconds_per_char: float = 0.01
    script: list[int] = field(default_factory=list)
    retry_after: str | None = None
    hang: float = 0.0
    body: bytes | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""


def tone(seconds: float, pitch: float) -> bytes:
    t = np.arange(max(1, round(seconds * RATE))) / RATE
    buffer = io.BytesIO()
    soundfile.write(buffer, 0.3 * np.sin(2 * np.pi * pitch * t), RATE, format="WAV")
    return buffer.getvalue()


@contextmanager
def fake_speech_server() -> Iterator[FakeSpeaker]:
    state = FakeSpeaker()

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
            body = json.loads(self.rfile.read(length) or b"{}")
            with state.lock:
                state.requests.append(body)
                state.auth.append(self.headers.get("Authorization"))
                status = state.script.pop(0) if state.script else 200
            if state.hang:
                state.stop.wait(state.hang)
            json_type = {"Content-Type": "application/json"}
            if self.path != "/v1/audio/speech":
                self._send(404, b'{"error": {"message": "not found"}}', json_type)
            elif status != 200:
                headers = dict(json_type)
                if state.retry_after is not None:
                    headers["Retry-After"] = state.retry_after
                error = {"error": {"message": f"fake {status}", "type": "server_error"}}
                self._send(status, json.dumps(error).encode(), headers)
            elif state.body is not None:
                self._send(200, state.body, {"Content-Type": "audio/wav"})
            else:
                text = str(body.get("input", ""))
                pitch = PITCH.get(str(body.get("voice")), 440.0)
                audio = tone(len(text) * state.seconds_per_char, pitch)
                self._send(200, audio, {"Content-Type": "audio/wav"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        server.shutdown()
        server.server_close()
