"""Child-process entry point: `python -m attachments.formats.child MODE PATH`.

Reads one untrusted Office document, e-book or HTML page (MODE: docx, odt, epub, pptx, xlsx,
html; for html an optional third argument, the page's address) under the
same address-space limit as the PDF children (NOTEBOOK_CHILD_MEMORY_MB) and writes one JSON
object per line to stdout: `{"number", "label", "text"}` per unit, and
`{"notice": "cells_cut", …}` when a sheet was cut at the cell cap. The zip's central
directory is checked first (NOTEBOOK_FORMAT_MAX_MEMBERS, NOTEBOOK_FORMAT_MAX_UNCOMPRESSED);
a refusal is `{"error": "refused", "reason", "limit"}`. The parent enforces the wall-clock
timeout by killing us.

Exit codes as the PDF child's: 0 done, 4 damaged/unsupported file, 5 out of memory; and
6 refused before parsing (a zip bomb).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from attachments.formats import sniff
from attachments.pdf.child import (
    EXIT_DAMAGED,
    EXIT_MEMORY,
    _emit,
    _limit_memory,
    _out_of_memory,
)

EXIT_REFUSED = 6
MODES = ("docx", "odt", "epub", "pptx", "xlsx", "html")


def _read_html(path: str, url: str) -> int:
    # web.read_html's messages go through Django's gettext: without the project's settings
    # here (none are needed to read a page) they are its English msgids.
    from django.conf import settings

    if not settings.configured:
        settings.configure(USE_I18N=False)
    from attachments.formats import FormatError
    from attachments.formats.web import read_html

    try:
        page = read_html(Path(path).read_bytes(), url=url or None)
    except FormatError as exc:
        _emit({"error": "unreadable", "message": str(exc)})
        return EXIT_DAMAGED
    _emit({"page": {"title": page.title, "date": page.date}})
    for unit in page.units:
        _emit({"number": unit.number, "label": unit.label, "text": unit.text,
               "start_seconds": unit.start_seconds})  # fmt: skip
    return 0


def _run(mode: str, path: str, url: str = "") -> int:
    if mode == "html":
        return _read_html(path, url)
    refusal = sniff.check_zip(
        Path(path),
        max_members=int(os.environ.get("NOTEBOOK_FORMAT_MAX_MEMBERS", sniff.MAX_MEMBERS)),
        max_uncompressed=int(
            os.environ.get("NOTEBOOK_FORMAT_MAX_UNCOMPRESSED", sniff.MAX_UNCOMPRESSED)
        ),
    )
    if refusal is not None:
        _emit({"error": "refused", "reason": refusal.reason, "limit": refusal.limit})
        return EXIT_REFUSED
    # openpyxl imports numpy when it can (only to recognise numpy's number types, which a
    # file read from disk never holds); numpy's OpenBLAS then starts a thread pool that,
    # under the address-space cap, ends the process with exit code 1. Keep numpy out.
    sys.modules.setdefault("numpy", None)  # type: ignore[arg-type]
    # the readers' libraries (lxml, python-docx, openpyxl, …) load only after the memory cap
    from attachments.formats import office

    if mode == "xlsx":
        max_cells = int(os.environ.get("NOTEBOOK_FORMAT_MAX_CELLS", "200000"))
        reading = office.read_xlsx(path, max_cells)
    else:
        reading = office.READERS[mode](path)
    for unit in reading.units:
        _emit({"number": unit.number, "label": unit.label, "text": unit.text})
    for notice in reading.notices:
        _emit(notice)
    return 0


def _parser_out_of_memory(exc: BaseException) -> bool:
    """Whether a parser's error is a failed allocation: libxml2 (lxml) reports one as a syntax
    error whose log says ERR_NO_MEMORY; a C extension may return failure without setting an
    exception (SystemError)."""
    log = getattr(exc, "error_log", None) or ()
    if any(getattr(entry, "type_name", "") == "ERR_NO_MEMORY" for entry in log):
        return True
    text = str(exc).lower()
    return "memory allocation failed" in text or (
        isinstance(exc, SystemError) and "without exception set" in text
    )


def main(argv: list[str]) -> int:
    _limit_memory()
    mode, path = argv[1], argv[2]
    url = argv[3] if len(argv) > 3 else ""
    if mode not in MODES:
        raise SystemExit(f"unknown mode {mode}")
    try:
        return _run(mode, path, url)
    except RecursionError:
        _emit({"error": "damaged", "message": "its structure is nested too deeply"})
        return EXIT_DAMAGED
    except BaseException as exc:  # any parser failure on untrusted input is "damaged"
        if isinstance(exc, SystemExit | KeyboardInterrupt):
            raise
        if _out_of_memory(exc) or _parser_out_of_memory(exc):
            return EXIT_MEMORY
        message = str(exc) or type(exc).__name__
        _emit({"error": "damaged", "message": f"{type(exc).__name__}: {message}"[:300]})
        return EXIT_DAMAGED


if __name__ == "__main__":
    sys.setrecursionlimit(5000)
    sys.exit(main(sys.argv))
