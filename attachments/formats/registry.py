"""The non-PDF formats a source may be in, each with how its content is recognised and how
it is read into units (attachments.formats.Unit). Upload validation asks `format_for` which
format an uploaded file is (its extension proposes, its content decides); ingestion asks
`read_units` to read a stored one. Formats register themselves here (`register`), from
attachments.formats.builtin, which AttachmentsConfig.ready() imports."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attachments.formats import FormatError, Unit

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Format:
    name: str  # NoteAttachment.format: "docx", "vtt", …
    kind: str  # NoteAttachment.Kind: "document", "web", "transcript", "audio"
    extensions: tuple[str, ...]  # lower case, with the dot: what an upload may be called
    media_types: tuple[str, ...]  # for the file picker's `accept`
    sniff: Callable[[Path], bool]  # whether the file's content is this format
    read: Callable[[Path], list[Unit]]  # its units (parsing untrusted files in a child)
    label: str  # what it is called in messages: "Word document"
    # Checked when a file of this format is offered: a reason to refuse it (e.g. audio
    # without a transcription server), or "" to accept.
    refusal: Callable[[], str] = lambda: ""


_FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> None:
    _FORMATS[fmt.name] = fmt


def formats() -> list[Format]:
    return list(_FORMATS.values())


def by_extension(extension: str) -> list[Format]:
    """The registered formats a file with this extension may be (".html": web)."""
    return [f for f in _FORMATS.values() if extension in f.extensions]


def get(name: str) -> Format | None:
    return _FORMATS.get(name)


def format_for(path: Path, extension: str) -> Format | None:
    """The format of the file at `path`, by its content, among those its extension names;
    None when its content is none of them (a renamed PDF, a random zip)."""
    for fmt in by_extension(extension):
        try:
            if fmt.sniff(path):
                return fmt
        except Exception:  # a sniffer choking on junk: it is not that format
            logger.info("%s sniffer refused %s", fmt.name, path.name, exc_info=True)
    return None


def read_units(name: str, path: Path) -> list[Unit]:
    """The units of a stored source of format `name`; FormatError when it cannot be read."""
    fmt = _FORMATS.get(name)
    if fmt is None:
        raise FormatError("This kind of file can no longer be read on this server.")
    return fmt.read(path)
