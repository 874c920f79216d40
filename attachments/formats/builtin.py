"""The formats this server reads besides PDFs and images, registered with
attachments.formats.registry (AttachmentsConfig.ready() imports this module)."""

from __future__ import annotations

from pathlib import Path

from attachments.formats import Unit, registry

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
    # not at import: trafilatura (lxml, justext, dateparser) loads in the worker, when a page
    # is read, not in every web process at start-up
    from attachments.formats.web import read_html

    return read_html(path.read_bytes()).units


registry.register(
    registry.Format(
        name="html",
        kind="document",
        extensions=(".html", ".htm", ".xhtml"),
        media_types=("text/html",),
        sniff=_looks_like_html,
        read=_read_html_file,
        label="HTML page",
    )
)
