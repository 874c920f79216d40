"""Audio files into time-stamped text, through an OpenAI-compatible speech-to-text server
(`POST /v1/audio/transcriptions`: OpenAI's whisper-1, or a local faster-whisper / whisper.cpp /
LocalAI / vLLM server speaking the same API).

Off unless TRANSCRIPTION_MODEL is set. TRANSCRIPTION_BASE_URL defaults to OPENAI_BASE_URL (the
chat model's server: OpenAI itself serves both); TRANSCRIPTION_API_KEY defaults to
OPENAI_API_KEY only while the base URL is that same server, so the chat model's key is never
sent to a different host. TRANSCRIPTION_TIMEOUT (seconds per request) defaults to 600: a
server transcribes an hour of audio in minutes.

One request per file, no splitting: a file over TRANSCRIPTION_MAX_BYTES (25 MB, OpenAI's limit)
is refused with a message saying so (splitting audio needs a decoder such as ffmpeg, which the
app does not ship). No SDK retries: the caller (a background job) decides, from
`TranscriptionError.retryable` and `retry_after`, whether and when to try again.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
from django.conf import settings

from core import llm, metrics

MAX_BYTES = 25 * 1024 * 1024  # OpenAI's limit for one transcription request
DEFAULT_TIMEOUT = 600.0

# The audio kinds `sniff_audio` names → the file name's extension the server reads it by.
EXTENSIONS = {
    "mp3": "mp3",
    "m4a": "m4a",
    "mp4": "mp4",
    "wav": "wav",
    "ogg": "ogg",
    "flac": "flac",
    "webm": "webm",
}


@dataclass(frozen=True)
class Segment:
    """A span of speech: seconds from the start of the recording, and what was said."""

    start: float
    end: float
    text: str


class TranscriptionUnavailable(Exception):
    """No transcription server is configured; the message is what an upload refusal shows."""

    def __init__(self, message: str = "") -> None:
        super().__init__(
            message
            or (
                "Audio files need a transcription server: set TRANSCRIPTION_MODEL (and "
                "TRANSCRIPTION_BASE_URL, TRANSCRIPTION_API_KEY for a server other than the chat "
                "model's) to an OpenAI-compatible speech-to-text model such as whisper-1; see "
                "docs/formats.md, “Transcripts and audio”."
            )
        )


class TranscriptionError(Exception):
    """The server could not transcribe the file; the message is for the user. `retryable`:
    trying again later may work (429, 5xx, a timeout, no connection); `retry_after`: the
    seconds the server asked to wait, if it said."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after


# --- Settings (read at each call, so a test's override applies at once)


def base_url() -> str:
    url = getattr(settings, "TRANSCRIPTION_BASE_URL", "")
    return str(url or getattr(settings, "OPENAI_BASE_URL", "") or "")


def api_key() -> str:
    key = getattr(settings, "TRANSCRIPTION_API_KEY", "")
    if key:
        return str(key)
    own_url = getattr(settings, "TRANSCRIPTION_BASE_URL", "")
    chat_url = getattr(settings, "OPENAI_BASE_URL", "")
    if not own_url or own_url == chat_url:
        return str(getattr(settings, "OPENAI_API_KEY", "") or "")
    return ""


def model() -> str:
    return str(getattr(settings, "TRANSCRIPTION_MODEL", "") or "")


def timeout() -> float:
    return float(getattr(settings, "TRANSCRIPTION_TIMEOUT", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT)


def max_bytes() -> int:
    return int(getattr(settings, "TRANSCRIPTION_MAX_BYTES", MAX_BYTES) or MAX_BYTES)


def transcription_available() -> bool:
    """Whether audio files can be transcribed (a model is configured; says nothing about
    whether its server is up)."""
    return bool(model())


# --- What kind of audio a file holds


def sniff_audio(path: Path) -> str | None:
    """The audio container by the file's first bytes: "mp3", "m4a", "mp4", "wav", "ogg",
    "flac", "webm", or None when it is none of them (whatever its name says)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
    except OSError:
        return None
    return sniff_audio_bytes(head)


def sniff_audio_bytes(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm"
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        return "m4a" if brand in (b"M4A ", b"M4B ", b"M4P ") else "mp4"
    if head[:3] == b"ID3":
        return "mp3"
    # An MPEG audio frame header: 11 sync bits, a version other than "reserved" (01), layer
    # III/II/I (not 00), and a bitrate index other than 1111.
    if len(head) >= 4 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        version, layer, bitrate = (head[1] >> 3) & 3, (head[1] >> 1) & 3, head[2] >> 4
        if version != 1 and layer != 0 and bitrate != 0xF:
            return "mp3"
    return None


# --- The request


def transcribe(path: Path, *, language: str | None = None) -> list[Segment]:
    """The speech in an audio file as segments in time order. Raises TranscriptionUnavailable
    when no server is configured, TranscriptionError for a file the server cannot take or a
    failing server (never an SDK exception)."""
    name = model()
    if not name:
        raise TranscriptionUnavailable()
    kind = sniff_audio(path)
    if kind is None:
        raise TranscriptionError(
            "This file is not audio the app can transcribe (MP3, M4A, MP4, WAV, Ogg, FLAC or "
            "WebM).",
            retryable=False,
        )
    size = path.stat().st_size
    limit = max_bytes()
    if size > limit:
        raise TranscriptionError(
            f"This audio file is {size / 1e6:.1f} MB; the transcription server takes at most "
            f"{limit / 1e6:.0f} MB per file. Compress it (for example to 64 kbit/s mono MP3) "
            "or split it, and upload the parts.",
            retryable=False,
        )
    api = llm.client(base_url(), api_key(), None, 0)
    where = host()
    seconds = timeout()
    try:
        with path.open("rb") as audio:
            raw = metrics.llm_call(
                "transcription",
                api.audio.transcriptions.with_raw_response.create,
                model=name,
                file=(f"audio.{EXTENSIONS[kind]}", audio),
                response_format="verbose_json",
                timestamp_granularities=["segment"],
                language=language or openai.omit,
                timeout=seconds,
            )
            body = raw.http_response.text
    except openai.APITimeoutError as exc:
        raise TranscriptionError(
            f"The transcription server at {where} did not answer within {seconds:g} s.",
            retryable=True,
        ) from exc
    except openai.APIConnectionError as exc:
        raise TranscriptionError(
            f"The transcription server at {where} did not answer. Check that it is running and "
            "that TRANSCRIPTION_BASE_URL is right.",
            retryable=True,
        ) from exc
    except openai.APIStatusError as exc:
        raise status_error(exc, where, name) from exc
    except openai.APIError as exc:
        raise TranscriptionError(
            f"The transcription server at {where} failed: {' '.join(str(exc).split())[:200]}",
            retryable=True,
        ) from exc
    return parse_segments(body, where)


def host() -> str:
    return urlsplit(base_url()).netloc or "api.openai.com"


def status_error(exc: openai.APIStatusError, where: str, name: str) -> TranscriptionError:
    status = exc.status_code
    detail = " ".join(exc.message.split())[:200]
    if status == 429:
        after = retry_after(exc.response.headers.get("retry-after"))
        wait = f" It asked to wait {after:g} s." if after is not None else ""
        return TranscriptionError(
            f"The transcription server at {where} is busy (HTTP 429).{wait} Try again later.",
            retryable=True,
            retry_after=after,
        )
    if status >= 500 or status in (408, 409):
        return TranscriptionError(
            f"The transcription server at {where} failed (HTTP {status}: {detail}). Try again "
            "later.",
            retryable=True,
            retry_after=retry_after(exc.response.headers.get("retry-after")),
        )
    if status in (401, 403):
        return TranscriptionError(
            f"The transcription server at {where} refused the API key (HTTP {status}). Check "
            "TRANSCRIPTION_API_KEY.",
            retryable=False,
        )
    if status == 404:
        return TranscriptionError(
            f"The transcription server at {where} has no model named ‘{name}’ or no "
            "/audio/transcriptions endpoint (HTTP 404). Check TRANSCRIPTION_MODEL, and that "
            "TRANSCRIPTION_BASE_URL ends with /v1 if the server needs it.",
            retryable=False,
        )
    if status == 413:
        return TranscriptionError(
            f"The transcription server at {where} refused the file as too large (HTTP 413).",
            retryable=False,
        )
    return TranscriptionError(
        f"The transcription server at {where} refused the file (HTTP {status}: {detail}).",
        retryable=False,
    )


def retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the delta form; an HTTP date is rare from these servers)."""
    try:
        seconds = float(value or "")
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def parse_segments(body: str, where: str) -> list[Segment]:
    """The segments of a verbose_json reply, in time order; a reply that is not one raises a
    retryable TranscriptionError (a proxy's error page, a server that ignored the format)."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        data = None
    raw = data.get("segments") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        shape = "no segments" if isinstance(data, dict) else "not JSON"
        raise TranscriptionError(
            f"The transcription server at {where} sent a reply the app cannot read ({shape}; "
            "it must support response_format verbose_json with segment timestamps).",
            retryable=True,
        )
    segments = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        start, end, text = item.get("start"), item.get("end"), item.get("text")
        if not isinstance(text, str) or not text.strip():
            continue
        if not isinstance(start, int | float) or not math.isfinite(start) or start < 0:
            continue
        if not isinstance(end, int | float) or not math.isfinite(end) or end < start:
            end = start
        segments.append(Segment(float(start), float(end), text.strip()))
    segments.sort(key=lambda segment: segment.start)
    return segments
