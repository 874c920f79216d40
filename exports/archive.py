"""A ZIP written as it is sent: the standard library's zipfile into a sink that hands each
piece on, so neither memory nor a temporary file holds the archive.

zipfile writes to an unseekable stream by putting each entry's sizes and CRC in a data
descriptor after its data (and Zip64 records when an entry or the archive passes 4 GiB), which
every unzip tool reads. An entry's content is produced only when it is written: a note is read
from the database then, an original file is read in 1 MiB blocks, so a notebook of large PDFs
costs one block of memory at a time and the download starts at once.

Markdown and JSON are deflated; originals (PDFs, images: compressed already) are stored, which
costs no CPU on a small machine. A file that disappeared between planning and writing (its
source deleted meanwhile) is left out and the README, written last, says so."""

from __future__ import annotations

import logging
import zipfile
from collections.abc import AsyncIterator, Callable, Generator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO

from asgiref.sync import sync_to_async
from django.utils import timezone

logger = logging.getLogger(__name__)

BLOCK = 1024 * 1024


@dataclass(frozen=True)
class Entry:
    """One file of the archive: `text` (made when written) or the file at `file`."""

    path: str
    modified: datetime
    text: Callable[[], str] | None = None
    file: Path | None = None
    # What the README says it is ("note", "conversation", "guide", "source", …).
    kind: str = ""


@dataclass
class Archive:
    """What goes into one ZIP, in order; `readme` writes the root README.md from the entries
    that were written and those that were missing, once all the others are."""

    entries: list[Entry] = field(default_factory=list)
    readme: Callable[[list[Entry], list[Entry]], str] | None = None

    def add_text(
        self, path: str, text: Callable[[], str], *, modified: datetime, kind: str
    ) -> None:
        self.entries.append(Entry(path, modified, text=text, kind=kind))

    def add_file(self, path: str, file: Path, *, modified: datetime, kind: str) -> None:
        self.entries.append(Entry(path, modified, file=file, kind=kind))


class _Sink:
    """A write-only stream: zipfile writes into it, the generator takes what was written."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._pieces.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def take(self) -> bytes:
        data = b"".join(self._pieces)
        self._pieces.clear()
        return data


def _info(
    path: str, modified: datetime, *, compress: int, size: int | None = None
) -> zipfile.ZipInfo:
    local = timezone.localtime(modified) if timezone.is_aware(modified) else modified
    # ZIP dates start in 1980.
    when = (local.year, local.month, local.day, local.hour, local.minute, local.second)
    stamp = max(when, (1980, 1, 1, 0, 0, 0))
    info = zipfile.ZipInfo(path, date_time=stamp)
    info.compress_type = compress
    info.external_attr = 0o644 << 16  # a plain, readable file when unpacked
    if size is not None:
        info.file_size = size  # lets zipfile decide on Zip64 for a large original
    return info


def _open(entry: Entry) -> IO[bytes] | None:
    assert entry.file is not None
    try:
        return entry.file.open("rb")
    except FileNotFoundError:
        logger.warning("export: %s is gone, left out", entry.file)
        return None


def zip_chunks(archive: Archive) -> Generator[bytes]:
    """The ZIP's bytes, piece by piece (a piece per entry, or per block of a large file)."""
    sink = _Sink()
    written: list[Entry] = []
    missing: list[Entry] = []
    with zipfile.ZipFile(sink, mode="w") as zf:
        for entry in archive.entries:
            if entry.text is not None:
                info = _info(entry.path, entry.modified, compress=zipfile.ZIP_DEFLATED)
                zf.writestr(info, entry.text().encode())
                written.append(entry)
                yield sink.take()
                continue
            source = _open(entry)
            if source is None:
                missing.append(entry)
                continue
            with source:
                size = Path(source.name).stat().st_size
                info = _info(entry.path, entry.modified, compress=zipfile.ZIP_STORED, size=size)
                with zf.open(info, mode="w") as target:
                    while block := source.read(BLOCK):
                        target.write(block)
                        yield sink.take()
            written.append(entry)
            yield sink.take()
        if archive.readme is not None:
            readme = archive.readme(written, missing)
            info = _info("README.md", timezone.now(), compress=zipfile.ZIP_DEFLATED)
            zf.writestr(info, readme.encode())
    yield sink.take()  # the central directory


def _next(chunks: Generator[bytes]) -> bytes | None:
    return next(chunks, None)


async def azip_chunks(archive: Archive) -> AsyncIterator[bytes]:
    """zip_chunks for an ASGI server, which would otherwise read a sync iterator whole before
    sending a byte. Each piece is made in the request's own sync thread (thread-sensitive),
    where Django keeps its database connection and closes it when the response ends."""
    chunks = zip_chunks(archive)
    pull = sync_to_async(_next, thread_sensitive=True)
    try:
        while (piece := await pull(chunks)) is not None:
            if piece:
                yield piece
    finally:
        # A download given up halfway: close the open original in the same thread.
        await sync_to_async(chunks.close, thread_sensitive=True)()
