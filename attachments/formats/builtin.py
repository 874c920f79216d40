"""The formats this server reads besides PDFs and images, registered with
attachments.formats.registry (AttachmentsConfig.ready() imports this module)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from django.utils.translation import gettext_noop

from attachments.formats import FormatError, Unit, registry
from attachments.formats import runner as office
from attachments.formats.transcripts import read_audio, read_transcript, sniff_transcript
from core.transcription import (
    TranscriptionError,
    TranscriptionUnavailable,
    sniff_audio,
    transcription_available,
)

# Enough of a file's start to recognise it by.
SNIFF_BYTES = 4096


def _looks_like_html(path: Path) -> bool:
    """An HTML file by its start: a doctype or one of the elements every page opens with,
    after optional white space and a byte-order mark; never a PDF or a zip renamed."""
    head = path.read_bytes()[:SNIFF_BYTES].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith((b"%pdf", b"pk\x03\x04")):
        return False
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body", b"<!--")) or (
        b"<html" in head[:1024]
    )


def _read_html_file(path: Path) -> list[Unit]:
    # trafilatura (lxml, justext, dateparser) parses the page in a capped child process
    return office.read_html_page(path)[2]


registry.register(
    registry.Format(
        name="html",
        kind="document",
        extensions=(".html", ".htm", ".xhtml"),
        media_types=("text/html",),
        sniff=_looks_like_html,
        read=_read_html_file,
        label=gettext_noop("HTML page"),
    )
)


# --- transcripts and audio ---------------------------------------------------------------------


def _sniffs_as(kind: str) -> Callable[[Path], bool]:
    def sniff(path: Path) -> bool:
        return sniff_transcript(path.read_bytes()[: 64 * 1024]) == kind

    return sniff


def _reads(kind: Literal["vtt", "srt"]) -> Callable[[Path], list[Unit]]:
    def read(path: Path) -> list[Unit]:
        return read_transcript(path.read_bytes(), kind=kind)

    return read


_TRANSCRIPTS = (
    ("vtt", gettext_noop("WebVTT transcript"), "text/vtt"),
    ("srt", gettext_noop("SubRip transcript"), "application/x-subrip"),
)
for _kind, _label, _media in _TRANSCRIPTS:
    registry.register(
        registry.Format(
            name=_kind, kind="transcript", extensions=(f".{_kind}",), media_types=(_media,),
            sniff=_sniffs_as(_kind), read=_reads(_kind), label=_label,  # type: ignore[arg-type]
        )
    )  # fmt: skip


def _read_audio(path: Path) -> list[Unit]:
    try:
        return read_audio(path)
    except (TranscriptionUnavailable, TranscriptionError) as exc:
        raise FormatError(str(exc)) from None


def _audio_refusal() -> str:
    return "" if transcription_available() else str(TranscriptionUnavailable())


def _sniffs_audio(*names: str) -> Callable[[Path], bool]:
    return lambda path: sniff_audio(path) in names


for _name, _extensions, _media, _formats in (
    ("mp3", (".mp3",), "audio/mpeg", ("mp3",)),
    ("m4a", (".m4a", ".mp4a", ".aac"), "audio/mp4", ("m4a", "mp4")),
    ("wav", (".wav",), "audio/wav", ("wav",)),
    ("ogg", (".ogg", ".oga", ".opus"), "audio/ogg", ("ogg",)),
):
    registry.register(
        registry.Format(
            name=_name, kind="audio", extensions=_extensions, media_types=(_media,),
            sniff=_sniffs_audio(*_formats), read=_read_audio, label=gettext_noop("audio file"),
            refusal=_audio_refusal,
        )
    )  # fmt: skip


# --- Office documents and e-books (read in a capped child: attachments.formats.runner) --------

_OFFICE = (
    ("docx", (".docx",), "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
    (
        "pptx",
        (".pptx",),
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ),
    ("xlsx", (".xlsx",), "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    ("odt", (".odt",), "application/vnd.oasis.opendocument.text"),
    ("epub", (".epub",), "application/epub+zip"),
)


def _office(name: str) -> tuple[Callable[[Path], bool], Callable[[Path], list[Unit]]]:
    return (lambda path: office.is_kind(path, name)), (lambda path: office.read_units(path, name))


for _name, _extensions, _media in _OFFICE:
    _sniff, _read = _office(_name)
    registry.register(
        registry.Format(
            name=_name, kind="document", extensions=_extensions, media_types=(_media,),
            sniff=_sniff, read=_read, label=office.kind_label(_name),
        )
    )  # fmt: skip
