"""Transcripts (.vtt, .srt) and audio transcriptions into windows of time.

Parsers: webvtt-py for WebVTT (the spec's blocks: header, NOTE, STYLE, REGION, cue settings,
hour-less timestamps) and srt for SubRip (tolerant of the numbering and blank-line quirks
real files have); both are small, pure Python and maintained. Their cues, a YouTube
transcript's snippets and a transcription's segments all become `Segment`s, then the same
windows: about WINDOW_SECONDS of speech or WINDOW_CHARS characters, whichever comes first,
never splitting a cue. A window's label is its start, `12:34` (`1:02:03` past an hour).

Text: voice spans `<v Name>` become "Name: …", every other tag
(bold, italic, classes, karaoke timestamps, <font>) is dropped, entities are decoded, and the
repeated lines of rolling captions (YouTube's automatic captions show each line twice, in two
cues) are collapsed.
"""

from __future__ import annotations

import codecs
import html
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import srt  # type: ignore[import-untyped]
import webvtt
from webvtt.errors import MalformedCaptionError, MalformedFileError

from attachments.formats import FormatError, Unit
from core.transcription import Segment, transcribe

TranscriptKind = Literal["vtt", "srt"]

WINDOW_SECONDS = 60.0
WINDOW_CHARS = 1500
MAX_CUE_CHARS = 10_000  # a caption is a line or two of speech; more is not a transcript
RECENT_LINES = 3  # rolling captions repeat one or two earlier lines

VOICE = re.compile(r"<v(?:\.[^\s>]*)?\s+([^>]+)>", re.IGNORECASE)
TAG = re.compile(r"<[^>]*>")
SRT_START = re.compile(r"\A\s*\d+\s*\r?\n\s*\d{1,3}:\d{1,2}:\d{1,2}[,.]\d{1,3}\s*-->")


# --- Bytes to text


def decode(data: bytes) -> str:
    """The text of a transcript file: UTF-8 (with or without a BOM), UTF-16 (by its BOM, or
    by the zero bytes of mostly-ASCII text), else Latin-1. Binary junk raises FormatError."""
    if data.startswith(codecs.BOM_UTF8):
        text = data[len(codecs.BOM_UTF8) :].decode("utf-8", errors="replace")
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = data.decode("utf-16", errors="replace")
    elif len(data) >= 4 and data[1::2][:64].count(0) > 24 and data[::2][:64].count(0) == 0:
        text = data.decode("utf-16-le", errors="replace")
    elif len(data) >= 4 and data[::2][:64].count(0) > 24 and data[1::2][:64].count(0) == 0:
        text = data.decode("utf-16-be", errors="replace")
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
    if "\x00" in text or sum(1 for c in text[:4096] if c < " " and c not in "\t\r\n\f") > 8:
        raise FormatError("This file is not a transcript: it holds binary data, not text.")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def sniff_transcript(data: bytes) -> TranscriptKind | None:
    """ "vtt" or "srt" by the file's content (a WebVTT header; a SubRip cue number and
    timing line), else None."""
    try:
        text = decode(data[:4096])
    except FormatError:
        return None
    head = text.lstrip("\ufeff \t\n")
    if re.match(r"WEBVTT(?:[ \t]|\n|\Z)", head):
        return "vtt"
    if SRT_START.match(head):
        return "srt"
    return None


# --- Cues to segments


def clean_lines(raw: str) -> list[str]:
    """A cue's lines as plain text: voice spans as "Name: …", other tags dropped, entities
    decoded, blank lines gone."""
    lines = []
    for line in raw.split("\n"):
        voice = VOICE.search(line)
        text = " ".join(html.unescape(TAG.sub("", line)).split())
        if not text:
            continue
        if voice:
            name = " ".join(html.unescape(TAG.sub("", voice.group(1))).split())
            if name:
                text = f"{name}: {text}"
        lines.append(text)
    return lines


def collapse(cues: Iterable[tuple[float, float, str]]) -> list[Segment]:
    """Cues (start, end, raw text) as segments in time order, with the lines rolling captions
    repeat from the cues before them left out (a cue left empty is dropped), and a cue that
    only extends the previous one's last line ("Hello" then "Hello there") merged into it."""
    ordered = sorted(cues, key=lambda cue: cue[0])
    segments: list[Segment] = []
    recent: list[str] = []
    for start, end, raw in ordered:
        lines = clean_lines(raw)
        if sum(len(line) for line in lines) > MAX_CUE_CHARS:
            raise FormatError(
                f"The caption at {label(start)} is {sum(len(line) for line in lines):,} "
                f"characters long; a caption holds a line or two of speech (at most "
                f"{MAX_CUE_CHARS:,} characters). Is this really a transcript?"
            )
        fresh: list[str] = []
        for line in lines:
            if line in recent:
                continue
            if segments and recent and line.startswith(recent[-1] + " ") and not fresh:
                # A growing line: replace the previous segment's last line with the longer one.
                prev = segments[-1]
                head, _, _ = prev.text.rpartition("\n")
                text = f"{head}\n{line}" if head else line
                segments[-1] = Segment(prev.start, max(prev.end, end), text)
                recent[-1] = line
                continue
            fresh.append(line)
        recent = (recent + fresh)[-RECENT_LINES:]
        if fresh:
            segments.append(Segment(start, max(start, end), "\n".join(fresh)))
        elif segments:
            prev = segments[-1]
            segments[-1] = Segment(prev.start, max(prev.end, end), prev.text)
    return segments


# --- Segments to windows


def label(seconds: float) -> str:
    """A time as a citation names it: `0:05`, `12:34`, `1:02:03`."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def windows(segments: Sequence[Segment]) -> list[Unit]:
    """Segments in windows of about WINDOW_SECONDS or WINDOW_CHARS, whichever comes first;
    a segment is never split (one longer than a window is a window of its own)."""
    units: list[Unit] = []
    current: list[Segment] = []
    chars = 0

    def close() -> None:
        start = current[0].start
        text = "\n".join(segment.text for segment in current)
        units.append(Unit(len(units) + 1, text, label(start), start))

    for segment in segments:
        if current and (
            segment.start - current[0].start >= WINDOW_SECONDS
            or chars + len(segment.text) > WINDOW_CHARS
        ):
            close()
            current, chars = [], 0
        current.append(segment)
        chars += len(segment.text) + 1
    if current:
        close()
    return units


# --- The readers


def read_transcript(data: bytes, *, kind: TranscriptKind) -> list[Unit]:
    """A .vtt or .srt file as windows of time. Raises FormatError (the message is for the
    user) for a file that is not one, or holds no captions."""
    text = decode(data)
    if kind == "vtt":
        cues = vtt_cues(text)
    elif kind == "srt":
        cues = srt_cues(text)
    else:
        raise FormatError(f"Unknown transcript format {kind!r}.")
    units = windows(collapse(cues))
    if not units:
        raise FormatError("This transcript holds no captions with text.")
    return units


def vtt_cues(text: str) -> list[tuple[float, float, str]]:
    try:
        captions = webvtt.WebVTT.from_string(text.lstrip("\ufeff"))
    except MalformedFileError as exc:
        raise FormatError(
            "This is not a WebVTT file: it must begin with the line WEBVTT, followed by cues "
            "such as “00:00:01.000 --> 00:00:04.000”."
        ) from exc
    except MalformedCaptionError as exc:
        raise FormatError(f"This WebVTT file has a caption with a bad timestamp ({exc}).") from exc
    except (ValueError, IndexError) as exc:
        raise FormatError(f"This WebVTT file cannot be read ({exc}).") from exc
    if not captions.captions and "-->" in text:
        # Every cue was malformed and skipped: read again strictly for the first one's error.
        try:
            webvtt.WebVTT.from_string(text.lstrip("\ufeff"), strict=True)
        except (MalformedCaptionError, MalformedFileError, ValueError, IndexError) as exc:
            raise FormatError(f"This WebVTT file has no caption that can be read ({exc}).") from exc
    return [
        (
            caption.start_time.in_milliseconds() / 1000,
            caption.end_time.in_milliseconds() / 1000,
            caption.raw_text,
        )
        for caption in captions.captions
    ]


def srt_cues(text: str) -> list[tuple[float, float, str]]:
    try:
        subtitles = list(srt.parse(text.lstrip("\ufeff")))
    except srt.SRTParseError as exc:
        raise FormatError(
            "This is not a SubRip (.srt) file, or part of it is not: each caption must be a "
            "number, a line such as “00:00:01,000 --> 00:00:04,000” and its text. "
            f"({' '.join(str(exc).split())[:200]})"
        ) from exc
    except (ValueError, OverflowError, TypeError) as exc:
        raise FormatError(f"This SubRip file cannot be read ({exc}).") from exc
    return [
        (sub.start.total_seconds(), sub.end.total_seconds(), str(sub.content)) for sub in subtitles
    ]


def read_audio(path: Path, *, language: str | None = None) -> list[Unit]:
    """An audio file's transcription as windows of time (core.transcription raises
    TranscriptionUnavailable / TranscriptionError). Raises FormatError when the server heard
    no speech."""
    units = windows(transcribe(path, language=language))
    if not units:
        raise FormatError("The transcription server heard no speech in this audio file.")
    return units
