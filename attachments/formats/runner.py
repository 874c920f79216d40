"""Read an Office document or e-book into units in a capped child process.

The worker never parses the file itself: `read_document` sniffs its type by content, runs
`attachments.formats.child` under the address-space cap and a wall-clock deadline (killing it
when that passes), and turns every failure into a `FormatError` a user can read.

Settings (all optional): FORMAT_TIMEOUT (seconds, default EXTRACT_TIMEOUT),
FORMAT_MEMORY_MB (default EXTRACT_MEMORY_MB), FORMAT_MAX_CELLS (spreadsheet cells read, default
200,000), FORMAT_MAX_UNCOMPRESSED (bytes a zip may unpack to, default 200 MB),
FORMAT_MAX_MEMBERS (members of a zip, default 10,000).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.utils.translation import gettext as _

from attachments.formats import FormatError, Unit, sniff
from attachments.pdf.child import EXIT_DAMAGED, EXIT_MEMORY

# attachments.formats.child.EXIT_REFUSED (not imported: that module is the child's)
EXIT_REFUSED = 6
BASE_DIR = Path(__file__).resolve().parent.parent.parent
MAX_CELLS = 200_000


@dataclass
class Document:
    """A file read into units, with notices for the user (e.g. a sheet cut at the cell cap)."""

    kind: str
    units: list[Unit]
    notices: list[str] = field(default_factory=list)


def kind_label(kind: str) -> str:
    """What a file of this kind is called in messages: "Word document"."""
    names = {
        "docx": _("Word document"),
        "pptx": _("PowerPoint presentation"),
        "xlsx": _("Excel workbook"),
        "odt": _("OpenDocument text"),
        "epub": _("EPUB e-book"),
    }
    return names.get(kind, _("document"))


def _limits() -> dict[str, float]:
    return {
        "timeout": float(getattr(settings, "FORMAT_TIMEOUT", settings.EXTRACT_TIMEOUT)),
        "memory_mb": int(getattr(settings, "FORMAT_MEMORY_MB", settings.EXTRACT_MEMORY_MB)),
        "max_cells": int(getattr(settings, "FORMAT_MAX_CELLS", MAX_CELLS)),
        "max_uncompressed": int(
            getattr(settings, "FORMAT_MAX_UNCOMPRESSED", sniff.MAX_UNCOMPRESSED)
        ),
        "max_members": int(getattr(settings, "FORMAT_MAX_MEMBERS", sniff.MAX_MEMBERS)),
    }


def _refusal_message(reason: str, limit: int) -> str:
    if reason == "members":
        return _(
            "This file holds more than %(limit)s parts, more than any real document; "
            "it was not opened."
        ) % {"limit": f"{limit:,}"}
    if reason == "size":
        return _(
            "This file unpacks to more than %(limit)s MB, more than allowed; it was not opened."
        ) % {"limit": f"{limit // (1024 * 1024):,}"}
    return _(
        "This file is compressed far more than any real document (a zip bomb), so it was "
        "not opened."
    )


def read_document(path: Path, kind: str | None = None) -> Document:
    """The units of the Office document or e-book at `path`, read in a child process under
    the FORMAT_* limits. `kind` ("docx", "pptx", "xlsx", "odt", "epub") defaults to what
    `sniff` finds; FormatError (message for the user) on any failure. Never raises anything
    else for a hostile file, and leaves no child behind."""
    limits = _limits()
    max_members = int(limits["max_members"])
    try:
        declared = sniff.declared_members(path)
    except OSError:
        declared = None
    if declared is not None and declared > max_members:
        raise FormatError(_refusal_message("members", max_members))
    found = sniff.sniff(path, max_members=max_members)
    kind = kind or found
    if kind is None:
        raise FormatError(
            _(
                "This file is not a Word, PowerPoint, Excel, OpenDocument text or EPUB file "
                "(or it is damaged)."
            )
        )
    if kind not in sniff.KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    if found != kind:
        raise FormatError(
            _("This file is damaged or not a real %(kind)s.") % {"kind": kind_label(kind)}
        )
    env = {
        **os.environ,
        "NOTEBOOK_CHILD_MEMORY_MB": str(int(limits["memory_mb"])),
        "NOTEBOOK_FORMAT_MAX_CELLS": str(int(limits["max_cells"])),
        "NOTEBOOK_FORMAT_MAX_UNCOMPRESSED": str(int(limits["max_uncompressed"])),
        "NOTEBOOK_FORMAT_MAX_MEMBERS": str(int(limits["max_members"])),
        "OPENPYXL_DEFUSEDXML": "True",  # openpyxl parses through defusedxml when it is there
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    code, output = _run_child([kind, str(path)], env, limits["timeout"])
    return _result(kind, code, output, int(limits["memory_mb"]))


def _run_child(args: list[str], env: dict[str, str], timeout: float) -> tuple[int, bytes]:
    """(exit code, stdout) of `python -m attachments.formats.child *args`, killed at
    `timeout` seconds (FormatError) and never left behind."""
    proc = subprocess.Popen(  # noqa: S603 - fixed argv, our own module
        [sys.executable, "-m", "attachments.formats.child", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=BASE_DIR,
        env=env,
    )
    try:
        output, _stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise FormatError(
            _("Reading this file took longer than %(seconds)s s, so it was stopped.")
            % {"seconds": f"{timeout:g}"}
        ) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, output


def read_html_page(path: Path, *, url: str | None = None) -> tuple[str, str | None, list[Unit]]:
    """(title, publication date or None, units) of the HTML file at `path` (a dropped file, or
    a page fetched from `url`), read by attachments.formats.web in a child process under the
    same memory cap and deadline as Office files: a hostile page (a parser blow-up, a
    pathological nesting) costs the child, never the worker. FormatError says why a page
    gives nothing to read."""
    limits = _limits()
    env = {
        **os.environ,
        "NOTEBOOK_CHILD_MEMORY_MB": str(int(limits["memory_mb"])),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    code, output = _run_child(["html", str(path), url or ""], env, limits["timeout"])
    title, date, units, refusal = "", None, [], None
    for raw in output.splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            continue  # a line cut short by a dying child
        if "page" in record:
            title, date = str(record["page"]["title"]), record["page"]["date"]
        elif record.get("error") == "unreadable":
            # web.read_html's own message, written in English by the child (which has no
            # translations): its msgid, so it is translated here when it has no placeholders.
            refusal = _(str(record["message"]))
        elif "number" in record:
            start = record.get("start_seconds")
            units.append(
                Unit(int(record["number"]), str(record["text"]), str(record["label"]),
                     float(start) if start is not None else None)
            )  # fmt: skip
    if refusal is not None:
        raise FormatError(refusal)
    if code == EXIT_MEMORY or code < 0:
        raise FormatError(
            _("This page takes more memory to read than allowed (%(limit)s MB).")
            % {"limit": int(limits["memory_mb"])}
        )
    if code != 0 or not units:
        raise FormatError(_("This page is damaged or not HTML."))
    return title, date, units


def _result(kind: str, code: int, output: bytes, memory_mb: int) -> Document:
    units: list[Unit] = []
    notices: list[str] = []
    errors: list[dict[str, object]] = []
    for raw in output.splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            continue  # a line cut short by a dying child
        if "error" in record:
            errors.append(record)
        elif record.get("notice") == "cells_cut":
            notices.append(
                _(
                    "Only the first %(limit)s cells of this workbook were read: sheet "
                    "“%(sheet)s” was cut at row %(row)s, and later sheets were left out."
                )
                % {
                    "limit": f"{int(record['limit']):,}",
                    "sheet": record["sheet"],
                    "row": f"{int(record['row']):,}",
                }
            )
        else:
            units.append(Unit(int(record["number"]), str(record["text"]), str(record["label"])))
    if code == EXIT_REFUSED:
        refused = next((e for e in errors if e["error"] == "refused"), {})
        raise FormatError(
            _refusal_message(str(refused.get("reason", "")), int(str(refused.get("limit", 0))))
        )
    if code == EXIT_MEMORY or code < 0:
        # Under the address-space cap, native code that cannot allocate usually crashes.
        if code < 0 and -code not in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT):
            raise FormatError(_("The reader stopped unexpectedly on this file."))
        raise FormatError(
            _("This file takes more memory to read than allowed (%(limit)s MB).")
            % {"limit": memory_mb}
        )
    if code == EXIT_DAMAGED or code != 0:
        raise FormatError(
            _("This file is damaged or not a real %(kind)s.") % {"kind": kind_label(kind)}
        )
    return Document(kind, units, notices)


def read_units(path: Path, kind: str) -> list[Unit]:
    """`read_document`'s units for the formats registry (`Format.read`): a notice (a sheet cut
    at the cell cap) becomes the last paragraph of the last unit, so a reader sees it."""
    document = read_document(path, kind)
    units = document.units
    if document.notices and units:
        last = units[-1]
        text = "\n\n".join([last.text, *(f"[{notice}]" for notice in document.notices)])
        units[-1] = Unit(last.number, text, last.label, last.start_seconds)
    return units


def is_kind(path: Path, kind: str) -> bool:
    """Whether the file's content is of this kind (`Format.sniff`), by `sniff.sniff`."""
    return sniff.sniff(path) == kind
