"""Transcripts (.vtt, .srt) and audio transcriptions into windows of time."""

from __future__ import annotations

import codecs
import math
import re
import struct
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from attachments.formats import FormatError, Unit
from attachments.formats.transcripts import (
    label,
    read_audio,
    read_transcript,
    sniff_transcript,
    windows,
)
from core.transcription import Segment, TranscriptionUnavailable
from tests.fake_transcription import FakeTranscriber, fake_transcription_server

VTT = """WEBVTT - a talk about bees
Kind: captions

STYLE
::cue { color: yellow }

NOTE This note is not spoken.

intro
00:00:01.000 --> 00:00:04.000 align:start position:10%
<v Roger Bingham>We are in <b>New York</b> <c.yellow>City</c> &amp; it's sunny

00:00:04.000 --> 00:00:07.500
<v.loud Neil deGrasse Tyson>Yes, <i>very</i> sunny.</v>

00:10.000 --> 00:12.000
<00:00:10.500><c>hour-less</c> timestamps
"""

SRT = """1
00:00:01,000 --> 00:00:03,000
<i>Hello</i> <font color="#ff0000">there</font>.

2
00:00:03,500 --> 00:00:05,000
Second line
of the second cue.

3
01:02:03,000 --> 01:02:05,000
After an hour.
"""


def vtt(*cues: tuple[float, float, str]) -> bytes:
    def stamp(seconds: float) -> str:
        hours, rest = divmod(seconds, 3600)
        minutes, secs = divmod(rest, 60)
        return f"{int(hours):02d}:{int(minutes):02d}:{secs:06.3f}"

    blocks = [f"{stamp(a)} --> {stamp(b)}\n{text}" for a, b, text in cues]
    return ("WEBVTT\n\n" + "\n\n".join(blocks) + "\n").encode()


def test_vtt_speakers_styling_and_entities():
    [unit] = read_transcript(VTT.encode(), kind="vtt")
    assert unit == Unit(
        number=1,
        text=(
            "Roger Bingham: We are in New York City & it's sunny\n"
            "Neil deGrasse Tyson: Yes, very sunny.\n"
            "hour-less timestamps"
        ),
        label="0:01",
        start_seconds=1.0,
    )


def test_srt_tags_dropped_lines_kept_and_hours_labelled():
    units = read_transcript(SRT.encode(), kind="srt")
    assert [(u.number, u.label, u.start_seconds) for u in units] == [
        (1, "0:01", 1.0),
        (2, "1:02:03", 3723.0),
    ]
    assert units[0].text == "Hello there.\nSecond line\nof the second cue."
    assert units[1].text == "After an hour."


def test_windows_of_about_a_minute_never_split_a_cue():
    # A cue every 7 s for five minutes, each 2 s long.
    cues = [(i * 7.0, i * 7.0 + 2, f"cue {i}") for i in range(43)]
    units = read_transcript(vtt(*cues), kind="vtt")
    assert [u.label for u in units] == ["0:00", "1:03", "2:06", "3:09", "4:12"]
    joined = "\n".join(u.text for u in units).splitlines()
    assert joined == [f"cue {i}" for i in range(43)]  # every cue once, whole, in order
    for unit in units:
        starts = [int(line.split()[1]) * 7.0 for line in unit.text.splitlines()]
        assert starts[-1] - starts[0] < 60


def test_windows_close_at_about_1500_characters():
    sentence = "word " * 58 + "end"  # 293 characters, 296 with the number
    cues = [(float(i), i + 1.0, f"{i:02d} {sentence}") for i in range(12)]
    units = read_transcript(vtt(*cues), kind="vtt")
    assert len(units) == 3  # 12 cues of ~300 characters, 5 to a window (≤ 1,500)
    assert all(len(u.text) <= 1500 for u in units)
    assert [u.label for u in units] == ["0:00", "0:05", "0:10"]


def test_a_cue_longer_than_a_window_is_a_window_of_its_own():
    long = "talk " * 600  # 3,000 characters
    units = read_transcript(vtt((0, 1, "short"), (1, 2, long), (2, 3, "after")), kind="vtt")
    assert [u.text for u in units] == ["short", long.strip(), "after"]


def test_rolling_captions_are_collapsed():
    # YouTube's automatic captions: each line shown twice, and a 10 ms cue repeating the
    # line that just finished; a line growing word by word.
    data = vtt(
        (0.0, 2.0, "so today we are"),
        (2.0, 2.01, "so today we are"),
        (2.01, 4.0, "so today we are\nlooking at hives"),
        (4.0, 4.01, "looking at hives"),
        (4.01, 6.0, "looking at hives\nand"),
        (6.0, 7.0, "looking at hives\nand their queens"),
        (7.0, 8.0, "Yes"),
        (8.0, 9.0, "Yesterday it rained"),
    )
    [unit] = read_transcript(data, kind="vtt")
    assert unit.text.splitlines() == [
        "so today we are",
        "looking at hives",
        "and their queens",
        "Yes",
        "Yesterday it rained",
    ]


def test_cues_out_of_order_are_put_in_time_order():
    data = SRT.replace("00:00:01,000 --> 00:00:03,000", "00:00:09,000 --> 00:00:10,000")
    [first, _] = read_transcript(data.encode(), kind="srt")
    assert first.start_seconds == 3.5
    assert first.text.splitlines()[-1] == "Hello there."


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(0, "0:00"), (5.9, "0:05"), (754, "12:34"), (3599, "59:59"), (3723, "1:02:03")],
)
def test_label(seconds: float, expected: str):
    assert label(seconds) == expected


@pytest.mark.parametrize(
    "encode",
    [
        lambda text: text.encode("utf-8"),
        lambda text: codecs.BOM_UTF8 + text.encode("utf-8"),
        lambda text: text.encode("utf-16"),  # with its BOM
        lambda text: text.encode("utf-16-le"),
        lambda text: text.encode("utf-16-be"),
        lambda text: text.replace("\n", "\r\n").encode("utf-8"),
    ],
)
def test_encodings(encode):
    text = SRT.replace("Hello", "Grüße, 你好")
    units = read_transcript(encode(text), kind="srt")
    assert units[0].text.startswith("Grüße, 你好 there.")
    assert sniff_transcript(encode(text)) == "srt"
    assert sniff_transcript(encode(VTT)) == "vtt"


def test_latin1_is_the_fallback():
    data = SRT.replace("Hello", "Grüße").encode("latin-1")
    assert read_transcript(data, kind="srt")[0].text.startswith("Grüße there.")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (VTT.encode(), "vtt"),
        (b"WEBVTT\n", "vtt"),
        (codecs.BOM_UTF8 + b"WEBVTT\n\n00:01.000 --> 00:02.000\nhi\n", "vtt"),
        (SRT.encode(), "srt"),
        (b"\n\n1\r\n00:00:01,000 --> 00:00:02,000\r\nhi\r\n", "srt"),
        (b"WEBVTTX\n", None),
        (b"1\nnot a timing line\n", None),
        (b"%PDF-1.7\n", None),
        (b"", None),
        (bytes(range(256)) * 4, None),
    ],
)
def test_sniff_transcript(data: bytes, expected: str | None):
    assert sniff_transcript(data) == expected


@pytest.mark.parametrize(
    ("data", "kind", "says"),
    [
        (b"Just some notes, no captions.", "vtt", "must begin with the line WEBVTT"),
        (b"Just some notes, no captions.", "srt", "not a SubRip"),
        (SRT.encode(), "vtt", "must begin with the line WEBVTT"),
        (VTT.encode(), "srt", "not a SubRip"),
        (bytes(range(256)) * 40, "vtt", "binary data"),
        (b"\x89PNG\r\n\x1a\n" + bytes(500), "srt", "binary data"),
        (b"WEBVTT\n\n00:00:99.000 --> 00:00:01.000\nbad\n", "vtt", "WebVTT"),
        (b"WEBVTT\n", "vtt", "no captions"),
        (b"", "srt", "no captions"),
        (b"WEBVTT\n\n00:01.000 --> 00:02.000\n<b></b>\n", "vtt", "no captions"),
    ],
)
def test_bad_input_is_a_clear_format_error(data: bytes, kind, says: str):
    with pytest.raises(FormatError) as caught:
        read_transcript(data, kind=kind)
    assert says in str(caught.value)


def test_srt_text_after_a_blank_line_stays_with_its_cue():
    # srt is tolerant: a stray paragraph belongs to the cue before it, not an error.
    data = b"1\n00:00:01,000 --> 00:00:02,000\nok\n\nstray words\n"
    assert read_transcript(data, kind="srt")[0].text == "ok\nstray words"


def test_ten_megabytes_of_one_cue_is_refused_quickly():
    data = b"WEBVTT\n\n00:00:01.000 --> 00:00:02.000\n" + b"blah " * 2_000_000
    started = time.monotonic()
    with pytest.raises(FormatError) as caught:
        read_transcript(data, kind="vtt")
    assert re.search(r"caption at 0:01 is [\d,]{9} characters long", str(caught.value))
    srt_data = b"1\n00:00:01,000 --> 00:00:02,000\n" + b"blah " * 2_000_000
    with pytest.raises(FormatError):
        read_transcript(srt_data, kind="srt")
    assert time.monotonic() - started < 30  # generous: a crash or a hang is what this catches


def test_windows_of_segments():
    segments = [Segment(float(s), s + 5.0, f"s{s}") for s in range(0, 200, 10)]
    units = windows(segments)
    assert [u.label for u in units] == ["0:00", "1:00", "2:00", "3:00"]
    assert units[1].text.splitlines() == ["s60", "s70", "s80", "s90", "s100", "s110"]
    assert windows([]) == []


# --- Audio, through a local server speaking OpenAI's transcription API


@pytest.fixture
def transcriber(settings) -> Iterator[FakeTranscriber]:
    with fake_transcription_server() as fake:
        settings.TRANSCRIPTION_BASE_URL = fake.url
        settings.TRANSCRIPTION_MODEL = "whisper-1"
        settings.TRANSCRIPTION_API_KEY = "k"
        yield fake


@pytest.fixture
def wav(tmp_path: Path) -> Path:
    path = tmp_path / "talk.wav"
    rate = 8000
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(
            b"".join(
                struct.pack("<h", int(5000 * math.sin(2 * math.pi * 220 * i / rate)))
                for i in range(rate // 4)
            )
        )
    return path


def test_audio_becomes_the_same_windows(transcriber: FakeTranscriber, wav: Path):
    transcriber.segments = [
        {"start": float(s), "end": s + 4.0, "text": f" segment {s}"} for s in range(0, 130, 5)
    ]
    units = read_audio(wav, language="en")
    assert [u.label for u in units] == ["0:00", "1:00", "2:00"]
    assert units[0].text.splitlines()[:2] == ["segment 0", "segment 5"]
    assert transcriber.requests[0].fields["language"] == ["en"]


def test_audio_without_speech_is_a_format_error(transcriber: FakeTranscriber, wav: Path):
    transcriber.segments = []
    with pytest.raises(FormatError) as caught:
        read_audio(wav)
    assert "no speech" in str(caught.value)


def test_audio_without_a_server_is_unavailable(settings, wav: Path):
    settings.TRANSCRIPTION_MODEL = ""
    with pytest.raises(TranscriptionUnavailable):
        read_audio(wav)
