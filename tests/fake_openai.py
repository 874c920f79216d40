"""A local server speaking OpenAI's /v1/embeddings protocol, for tests of the HTTP path.

Behaviour is scripted per request: a list of HTTP statuses to answer before succeeding, or a
status to answer forever, and `hang` seconds to wait before answering (a stuck server), or
`hold`: requests whose payload it accepts wait until `release` is set (a client caught
mid-request).
Vectors are deterministic (hashed words), so similar texts get similar vectors.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def fake_vector(text: str, dims: int) -> list[float]:
    vec = [0.0] * dims
    for word in text.lower().split():
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
        vec[h % dims] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class FakeOpenAI:
    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.script: list[int] = []  # statuses to answer first, in order
        self.always: int | None = None  # answer this status to every request
        self.hang = 0.0  # seconds to wait before answering (the client times out first)
        self.hold: Callable[[dict[str, Any]], bool] | None = None
        self.held: list[dict[str, Any]] = []  # payloads `hold` accepted
        self.release = threading.Event()
        self.stop = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.url = ""


@contextmanager
def fake_openai_server(dims: int = 384) -> Iterator[FakeOpenAI]:
    state = FakeOpenAI(dims)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("retry-after-ms", "5")  # keep the SDK's backoff short in tests
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client is gone (killed, or timed out)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            payload = json.loads(self.rfile.read(length) or b"{}")
            state.requests.append(
                {"path": self.path, "body": payload, "auth": self.headers.get("Authorization")}
            )
            if state.hang:
                state.stop.wait(state.hang)
            if state.hold is not None and state.hold(payload):
                state.held.append(payload)
                while not (state.release.wait(0.1) or state.stop.is_set()):
                    pass
            status = state.always or (state.script.pop(0) if state.script else 200)
            if self.path != "/v1/embeddings":
                self._json(404, {"error": {"message": "not found"}})
            elif status != 200:
                kinds = {429: "rate_limit_exceeded", 401: "invalid_api_key"}
                self._json(
                    status,
                    {
                        "error": {
                            "message": f"fake {status}",
                            "type": kinds.get(status, "server_error"),
                        }
                    },
                )
            else:
                inputs = (
                    payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
                )
                data = [
                    {"object": "embedding", "index": i, "embedding": fake_vector(text, state.dims)}
                    for i, text in enumerate(inputs)
                ]
                self._json(
                    200,
                    {
                        "object": "list",
                        "data": data,
                        "model": payload.get("model"),
                        "usage": {"prompt_tokens": 1, "total_tokens": 1},
                    },
                )

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()  # let hanging handlers finish
        server.shutdown()
        server.server_close()
