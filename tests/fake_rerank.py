"""A local server speaking the rerank protocols, for tests of the reranker's HTTP paths.

`POST /rerank` answers like Cohere/Jina (`{"results": [{"index", "relevance_score"}]}`) or, with
`shape = "tei"`, like TEI (a bare `[{"index", "score"}]`). `POST /v1/chat/completions` answers a
non-streaming chat completion whose content is the JSON ranking. Scores are the number of query
words a passage shares, so the expected order is easy to state. `behaviour` scripts failures.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Behaviour = Literal["ok", "500", "429", "slow", "malformed", "wrong-count"]


def overlap(query: str, text: str) -> float:
    return float(len(set(query.lower().split()) & set(text.lower().split())))


@dataclass
class FakeRerank:
    behaviour: Behaviour = "ok"
    shape: Literal["cohere", "tei"] = "cohere"
    slow_seconds: float = 30.0  # "slow": how long to wait before answering
    ranking: list[Any] | None = None  # llm: the ranking to answer instead of the overlap order
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""  # http://127.0.0.1:port
    release: threading.Event = field(default_factory=threading.Event)

    def answer(self, path: str, payload: dict[str, Any]) -> tuple[int, Any]:
        if self.behaviour in ("500", "429"):
            return int(self.behaviour), {"error": {"message": f"fake {self.behaviour}"}}
        if self.behaviour == "slow":
            self.release.wait(self.slow_seconds)
        if path == "/rerank":
            return 200, self._rerank(payload)
        if path == "/v1/chat/completions":
            return 200, self._chat(payload)
        return 404, {"error": {"message": "not found"}}

    def _rerank(self, payload: dict[str, Any]) -> Any:
        if self.behaviour == "malformed":
            return {"results": [{"index": "first", "relevance_score": "high"}]}
        texts = payload["texts"] if self.shape == "tei" else payload["documents"]
        scores = [overlap(payload["query"], text) for text in texts]
        if self.behaviour == "wrong-count":
            scores = scores[:-1]
        order = sorted(range(len(scores)), key=lambda i: -scores[i])[: payload.get("top_n")]
        if self.shape == "tei":
            return [{"index": i, "score": scores[i]} for i in order]
        return {"results": [{"index": i, "relevance_score": scores[i]} for i in order]}

    def _chat(self, payload: dict[str, Any]) -> dict[str, Any]:
        if self.behaviour == "malformed":
            content = "Passage 2 looks best to me."
        elif self.ranking is not None:
            content = json.dumps({"ranking": self.ranking})
        else:
            content = json.dumps({"ranking": [1]})
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": payload.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }


@contextmanager
def fake_rerank_server() -> Iterator[FakeRerank]:
    state = FakeRerank()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            payload = json.loads(self.rfile.read(length) or b"{}")
            state.requests.append(
                {"path": self.path, "body": payload, "auth": self.headers.get("Authorization")}
            )
            status, body = state.answer(self.path, payload)
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting ("slow")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()  # let "slow" handlers finish
        server.shutdown()
        server.server_close()
