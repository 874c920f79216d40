"""core.transcription against a local server speaking OpenAI's audio transcription API."""

from __future__ import annotations

import math
import struct
import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.transcription import (
    Segment,
    TranscriptionError,
    TranscriptionUnavailable,
    sniff_audio,
    transcribe,
    transcription_available,
)
from tests.fake_transcription import FakeTranscriber, fake_transcription_server

SEGMENTS = [
    {"start": 0.0, "end": 2.5, "text": " Hello and welcome."},
    {"start": 2.5, "end": 5.0, "text": " Today we talk about bees."},
]


def write_wav(path: Path, seconds: float = 0.5) -> Path:
    """A real WAV file: a 440 Hz tone, 16-bit mono at 8 kHz."""
    rate = 8000
    frames = b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / rate)))
        for i in range(int(rate * seconds))
    )
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(frames)
    return path


@pytest.fixture
def server(settings) -> Iterator[FakeTranscriber]:
    with fake_transcription_server() as fake:
        fake.segments = list(SEGMENTS)
        settings.TRANSCRIPTION_BASE_URL = fake.url
        settings.TRANSCRIPTION_MODEL = "whisper-1"
        settings.TRANSCRIPTION_API_KEY = "audio-key"
        settings.TRANSCRIPTION_TIMEOUT = 5
        yield fake


@pytest.fixture
def wav(tmp_path: Path) -> Path:
    return write_wav(tmp_path / "talk.wav")


def test_transcribe_uploads_the_file_and_reads_segments(server: FakeTranscriber, wav: Path):
    segments = transcribe(wav, language="en")

    assert segments == [
        Segment(0.0, 2.5, "Hello and welcome."),
        Segment(2.5, 5.0, "Today we talk about bees."),
    ]
    [upload] = server.requests
    assert upload.path == "/v1/audio/transcriptions"
    assert upload.fields["model"] == ["whisper-1"]
    assert upload.fields["response_format"] == ["verbose_json"]
    assert upload.fields["timestamp_granularities[]"] == ["segment"]
    assert upload.fields["language"] == ["en"]
    assert upload.filename == "audio.wav"
    assert upload.audio == wav.read_bytes()
    assert upload.auth == "Bearer audio-key"


def test_no_language_is_sent_when_none_is_given(server: FakeTranscriber, wav: Path):
    transcribe(wav)
    assert "language" not in server.requests[0].fields


def test_segments_come_back_in_time_order_without_empty_or_broken_ones(
    server: FakeTranscriber, wav: Path
):
    server.segments = [
        {"start": 4.0, "end": 6.0, "text": "second"},
        {"start": 1.0, "end": 0.5, "text": "first"},  # an end before its start
        {"start": 2.0, "end": 3.0, "text": "   "},
        {"start": "soon", "end": 3.0, "text": "no start"},
    ]
    assert transcribe(wav) == [Segment(1.0, 1.0, "first"), Segment(4.0, 6.0, "second")]


def test_without_a_model_transcription_is_unavailable(settings, wav: Path):
    settings.TRANSCRIPTION_MODEL = ""
    assert not transcription_available()
    with pytest.raises(TranscriptionUnavailable) as caught:
        transcribe(wav)
    message = str(caught.value)
    assert "TRANSCRIPTION_MODEL" in message
    assert "TRANSCRIPTION_BASE_URL" in message
    assert "docs/formats.md" in message
    settings.TRANSCRIPTION_MODEL = "whisper-1"
    assert transcription_available()


def test_the_chat_models_key_goes_only_to_the_chat_models_server(
    server: FakeTranscriber, settings, wav: Path
):
    settings.TRANSCRIPTION_API_KEY = ""
    settings.OPENAI_API_KEY = "chat-secret"
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"  # another server
    transcribe(wav)
    assert "chat-secret" not in (server.requests[-1].auth or "")

    settings.OPENAI_BASE_URL = server.url  # the same server: its key is the one to use
    settings.TRANSCRIPTION_BASE_URL = ""
    transcribe(wav)
    assert server.requests[-1].auth == "Bearer chat-secret"


def test_429_is_retryable_with_the_servers_retry_after(server: FakeTranscriber, wav: Path):
    server.script = [429]
    server.retry_after = "7"
    with pytest.raises(TranscriptionError) as caught:
        transcribe(wav)
    assert caught.value.retryable
    assert caught.value.retry_after == 7.0
    assert "busy (HTTP 429)" in caught.value.message
    assert len(server.requests) == 1  # no retries of our own: the job decides


def test_server_errors_are_retryable(server: FakeTranscriber, wav: Path):
    server.script = [503]
    with pytest.raises(TranscriptionError) as caught:
        transcribe(wav)
    assert caught.value.retryable
    assert "HTTP 503" in caught.value.message


@pytest.mark.parametrize(
    ("status", "says"),
    [(401, "TRANSCRIPTION_API_KEY"), (404, "TRANSCRIPTION_MODEL"), (400, "HTTP 400")],
)
def test_refusals_are_final(server: FakeTranscriber, wav: Path, status: int, says: str):
    server.script = [status]
    with pytest.raises(TranscriptionError) as caught:
        transcribe(wav)
    assert not caught.value.retryable
    assert says in caught.value.message


def test_a_hanging_server_times_out(server: FakeTranscriber, settings, wav: Path):
    settings.TRANSCRIPTION_TIMEOUT = 1
    server.hang = 30
    with pytest.raises(TranscriptionError) as caught:
        transcribe(wav)
    assert caught.value.retryable
    assert "did not answer within 1 s" in caught.value.message


def test_a_server_that_is_down_is_retryable(settings, wav: Path):
    settings.TRANSCRIPTION_MODEL = "whisper-1"
    settings.TRANSCRIPTION_BASE_URL = "http://127.0.0.1:9/v1"  # discard port: refused
    with pytest.raises(TranscriptionError) as caught:
        transcribe(wav)
    assert caught.value.retryable
    assert "TRANSCRIPTION_BASE_URL" in caught.value.message


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("<html>502 Bad Gateway</html>", "not JSON"),
        ('{"text": "hello"}', "no segments"),
        ('{"segments": "many"}', "no segments"),
    ],
)
def test_replies_without_segments_are_errors(server: FakeTranscriber, wav: Path, body, says):
    server.body = body
    with pytest.raises(TranscriptionError) as caught:
        transcribe(wav)
    assert caught.value.retryable
    assert says in caught.value.message
    assert "verbose_json" in caught.value.message


def test_files_over_the_limit_are_refused_before_sending(
    server: FakeTranscriber, settings, wav: Path
):
    settings.TRANSCRIPTION_MAX_BYTES = 1000
    with pytest.raises(TranscriptionError) as caught:
        transcribe(wav)
    assert not caught.value.retryable
    assert "at most" in caught.value.message
    assert server.requests == []


def test_a_file_that_is_not_audio_is_refused_before_sending(
    server: FakeTranscriber, tmp_path: Path
):
    fake = tmp_path / "talk.mp3"
    fake.write_text("just some text pretending to be an mp3")
    with pytest.raises(TranscriptionError) as caught:
        transcribe(fake)
    assert not caught.value.retryable
    assert "not audio" in caught.value.message
    assert server.requests == []


def test_sniff_audio_by_content(tmp_path: Path, wav: Path):
    def file(name: str, head: bytes) -> Path:
        path = tmp_path / name
        path.write_bytes(head + bytes(64))
        return path

    assert sniff_audio(wav) == "wav"
    assert sniff_audio(file("a.mp3", b"ID3\x04\x00\x00\x00\x00\x00\x00")) == "mp3"
    # An MPEG-1 layer III frame header (128 kbit/s, 44.1 kHz) without an ID3 tag.
    assert sniff_audio(file("b.mp3", b"\xff\xfb\x90\x64")) == "mp3"
    assert sniff_audio(file("c.m4a", b"\x00\x00\x00\x20ftypM4A \x00\x00\x00\x00")) == "m4a"
    assert sniff_audio(file("d.mp4", b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00")) == "mp4"
    assert sniff_audio(file("e.ogg", b"OggS\x00\x02")) == "ogg"
    assert sniff_audio(file("f.flac", b"fLaC\x00\x00\x00\x22")) == "flac"
    assert sniff_audio(file("g.webm", b"\x1a\x45\xdf\xa3")) == "webm"
    # Named like audio, but not: text, a PDF, a header with a reserved MPEG version, nothing.
    assert sniff_audio(file("h.mp3", b"hello world")) is None
    assert sniff_audio(file("i.wav", b"%PDF-1.7")) is None
    assert sniff_audio(file("j.mp3", b"\xff\xeb\x90\x64")) is None
    empty = tmp_path / "k.wav"
    empty.write_bytes(b"")
    assert sniff_audio(empty) is None
    assert sniff_audio(tmp_path / "missing.wav") is None
