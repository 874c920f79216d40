"""A local stand-in for the three YouTube endpoints youtube-transcript-api 1.2.5 asks, serving
the shapes it reads (recorded from the library's requests):

- GET  /watch?v=<id>: the watch page; the library takes `"INNERTUBE_API_KEY": "…"` from it;
- POST /youtubei/v1/player?key=<key>: JSON with `playabilityStatus`, `videoDetails.title` and
  `captions.playerCaptionsTracklistRenderer.captionTracks` (baseUrl, name.runs, languageCode,
  kind "asr" for automatic captions);
- GET  /api/timedtext?v=<id>&lang=<code>: `<transcript><text start dur>…</text></transcript>`.

Caption URLs in the player reply name https://www.youtube.com, as YouTube's do; the client's
session sends them here. Behaviour per video (`videos`), and `status` (answer every request
with it) or `junk` (answer every request with text that is no page, JSON or XML).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

API_KEY = "AIzaStandInKey_123"


@dataclass
class Video:
    title: str
    # language code → (snippets (start, duration, text), automatic?)
    tracks: dict[str, tuple[list[tuple[float, float, str]], bool]] = field(default_factory=dict)
    playability: dict[str, Any] = field(default_factory=lambda: {"status": "OK"})
    captions_xml: str | None = None  # instead of the snippets' XML
    caption_host: str = "www.youtube.com"  # where the player reply says the captions are


@dataclass
class FakeYouTube:
    videos: dict[str, Video] = field(default_factory=dict)
    status: int | None = None
    junk: bool = False
    recaptcha: bool = False  # the watch page is a "are you a robot" page
    hang: float = 0.0  # seconds to wait before answering (the client times out first)
    stop: threading.Event = field(default_factory=threading.Event)
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""


def timedtext(snippets: list[tuple[float, float, str]]) -> str:
    items = "".join(
        f'<text start="{start}" dur="{duration}">{escape(escape(text))}</text>'
        for start, duration, text in snippets
    )
    return f'<?xml version="1.0" encoding="utf-8" ?><transcript>{items}</transcript>'


@contextmanager
def fake_youtube_server() -> Iterator[FakeYouTube]:
    state = FakeYouTube()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: str, content_type: str) -> None:
            data = body.encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _answer(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {key: values[0] for key, values in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length)) if length else None
            state.requests.append(
                {"method": method, "path": parts.path, "query": query, "body": body}
            )
            if state.hang:
                state.stop.wait(state.hang)
            if state.status is not None:
                self._send(state.status, "<html>Too many requests</html>", "text/html")
                return
            if state.junk:
                self._send(200, "\x00\x01 not a page {[<", "text/html")
                return
            if method == "GET" and parts.path == "/watch":
                if state.recaptcha:
                    page = '<html><div class="g-recaptcha"></div></html>'
                else:
                    page = f'<html><script>ytcfg.set({{"INNERTUBE_API_KEY": "{API_KEY}"}})</script>'
                self._send(200, page, "text/html")
            elif method == "POST" and parts.path == "/youtubei/v1/player":
                vid = str((body or {}).get("videoId", ""))
                video = state.videos.get(vid)
                if query.get("key") != API_KEY or video is None:
                    reply: dict[str, Any] = {
                        "playabilityStatus": {
                            "status": "ERROR",
                            "reason": "This video is unavailable",
                        }
                    }
                else:
                    reply = {
                        "playabilityStatus": video.playability,
                        "videoDetails": {"title": video.title},
                    }
                    if video.tracks:
                        tracks = [
                            {
                                "baseUrl": f"https://{video.caption_host}/api/timedtext?v={vid}&lang={code}",
                                "name": {"runs": [{"text": code}]},
                                "languageCode": code,
                                **({"kind": "asr"} if automatic else {}),
                                "isTranslatable": False,
                            }
                            for code, (_, automatic) in video.tracks.items()
                        ]
                        reply["captions"] = {
                            "playerCaptionsTracklistRenderer": {"captionTracks": tracks}
                        }
                self._send(200, json.dumps(reply), "application/json")
            elif method == "GET" and parts.path == "/api/timedtext":
                video = state.videos.get(query.get("v", ""))
                track = video.tracks.get(query.get("lang", "")) if video else None
                if video is None or track is None:
                    self._send(404, "", "text/xml")
                elif video.captions_xml is not None:
                    self._send(200, video.captions_xml, "text/xml")
                else:
                    self._send(200, timedtext(track[0]), "text/xml")
            else:
                self._send(404, "not found", "text/plain")

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()  # let hanging handlers finish
        server.shutdown()
        server.server_close()
