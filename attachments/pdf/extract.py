"""Run `attachments.pdf.child` processes: page count, text per page (in parallel), OCR.

The parent never parses the PDF itself. Each child gets an address-space cap and the whole
step a wall-clock deadline; a child that overruns is killed and the step fails with a reason
a user can read. Progress is reported page by page through a callback.
"""

from __future__ import annotations

import json
import math
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from attachments.pdf.child import EXIT_DAMAGED, EXIT_MEMORY, EXIT_PASSWORD

ProgressCallback = Callable[[int, int], None]
BASE_DIR = Path(__file__).resolve().parent.parent.parent


class PdfError(Exception):
    """A permanent problem with the file; the message is shown to the user."""


class PasswordRequired(PdfError):
    pass


@dataclass
class Line:
    start: int
    end: int
    size: float
    bold: bool


@dataclass
class ExtractedPage:
    number: int
    text: str
    lines: list[Line] = field(default_factory=list)
    is_ocr: bool = False


def _spawn(
    mode: str, path: Path, pages: str, password: str, memory_mb: int
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "NOTEBOOK_CHILD_MEMORY_MB": str(memory_mb),
        "NOTEBOOK_OCR_DPI": str(settings.OCR_DPI),
        "OMP_NUM_THREADS": "1",  # parallelism comes from our processes, not from BLAS threads
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    args = [sys.executable, "-m", "attachments.pdf.child", mode, str(path)]
    if pages:
        args.append(pages)
    proc = subprocess.Popen(  # noqa: S603 - fixed argv, our own module
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=BASE_DIR,
        env=env,
    )
    assert proc.stdin is not None
    proc.stdin.write((password or "").replace("\n", " ").encode() + b"\n")
    proc.stdin.close()
    return proc


def _run(
    mode: str,
    path: Path,
    page_groups: list[str],
    password: str,
    *,
    timeout: float,
    memory_mb: int,
    on_record: Callable[[dict[str, Any]], None],
) -> None:
    """Run one child per page group at once; call `on_record` for each JSON line as it comes."""
    deadline = time.monotonic() + timeout
    procs = [_spawn(mode, path, group, password, memory_mb) for group in page_groups or [""]]
    sel = selectors.DefaultSelector()
    buffers: dict[int, bytes] = {}
    errors: list[dict[str, Any]] = []
    try:
        for proc in procs:
            assert proc.stdout is not None
            os.set_blocking(proc.stdout.fileno(), False)
            sel.register(proc.stdout, selectors.EVENT_READ, proc)
            buffers[proc.pid] = b""
        open_streams = len(procs)
        while open_streams:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PdfError(
                    f"Reading the file took longer than {int(timeout)} seconds, so it was "
                    "stopped. The PDF may be damaged or built to be expensive to read."
                )
            for key, _ in sel.select(timeout=min(remaining, 1.0)):
                proc = key.data
                chunk = key.fileobj.read(65536)  # type: ignore[union-attr]
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                data = buffers[proc.pid] + chunk
                *complete, buffers[proc.pid] = data.split(b"\n")
                for raw in complete:
                    record = json.loads(raw)
                    if "error" in record:
                        errors.append(record)
                    else:
                        on_record(record)
        for proc in procs:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise PdfError(f"Reading the file took longer than {int(timeout)} seconds.") from None
    finally:
        sel.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    codes = {proc.returncode for proc in procs}
    kinds = {e["error"] for e in errors}
    if EXIT_PASSWORD in codes or "password" in kinds:
        raise PasswordRequired("This PDF is password-protected.")
    if EXIT_MEMORY in codes or "memory" in kinds or any(c < 0 for c in codes):
        raise PdfError(
            f"Reading the file needed more than {memory_mb} MB of memory, so it was stopped. "
            "The PDF may be damaged or built to exhaust memory."
        )
    if EXIT_DAMAGED in codes or "damaged" in kinds:
        detail = next((e.get("message", "") for e in errors if e["error"] == "damaged"), "")
        raise PdfError(_damaged_message(detail))
    if codes != {0}:
        raise PdfError(f"The PDF reader stopped unexpectedly (exit codes {sorted(codes)}).")


def _damaged_message(detail: str) -> str:
    if "EOF" in detail or "trailer" in detail.lower():
        return "The file is damaged or incomplete: it ends before the PDF does. Upload it again."
    return f"The PDF cannot be read; it looks damaged ({detail or 'unknown error'})."


def page_count(path: Path, password: str = "", *, timeout: float | None = None) -> int:
    """Pages in the document, counted by walking its page tree in a child process."""
    result: dict[str, int] = {}
    _run(
        "info",
        path,
        [],
        password,
        timeout=timeout or settings.EXTRACT_TIMEOUT,
        memory_mb=settings.EXTRACT_MEMORY_MB,
        on_record=lambda r: result.update(r),
    )
    if "page_count" not in result:
        raise PdfError("The PDF has no readable page tree.")
    return result["page_count"]


def _groups(pages: list[int], processes: int) -> list[str]:
    """Split pages into at most `processes` contiguous runs, written as "a-b,c,d-e"."""
    if not pages:
        return []
    size = math.ceil(len(pages) / processes)
    groups = []
    for i in range(0, len(pages), size):
        run = pages[i : i + size]
        groups.append(",".join(str(p) for p in run) if len(run) < 3 else _compact(run))
    return groups


def _compact(pages: list[int]) -> str:
    parts: list[str] = []
    start = prev = pages[0]
    for p in pages[1:]:
        if p == prev + 1:
            prev = p
            continue
        parts.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = p
    parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts)


def extract_text(
    path: Path,
    total_pages: int,
    password: str = "",
    *,
    on_progress: ProgressCallback | None = None,
    processes: int | None = None,
) -> list[ExtractedPage]:
    """Text and line styles of every page, extracted by up to `processes` children at once."""
    workers = processes or settings.EXTRACT_PROCESSES
    # A child costs ~0.3 s to start; below ~6 pages each, extra children do not pay off.
    workers = max(1, min(workers, math.ceil(total_pages / 6)))
    pages: dict[int, ExtractedPage] = {}

    def collect(record: dict[str, Any]) -> None:
        lines = [Line(*values) for values in record.get("lines", [])]
        pages[record["page"]] = ExtractedPage(record["page"], record["text"], lines)
        if on_progress:
            on_progress(len(pages), total_pages)

    _run(
        "text",
        path,
        _groups(list(range(1, total_pages + 1)), workers),
        password,
        timeout=settings.EXTRACT_TIMEOUT,
        memory_mb=settings.EXTRACT_MEMORY_MB,
        on_record=collect,
    )
    return [pages.get(n) or ExtractedPage(n, "") for n in range(1, total_pages + 1)]


def ocr_pages(
    path: Path,
    numbers: list[int],
    password: str = "",
    *,
    on_progress: ProgressCallback | None = None,
) -> dict[int, str]:
    """OCR text for the given pages (rendered with PDFium, read by RapidOCR), in one child."""
    texts: dict[int, str] = {}

    def collect(record: dict[str, Any]) -> None:
        texts[record["page"]] = record["text"]
        if on_progress:
            on_progress(len(texts), len(numbers))

    if numbers:
        _run(
            "ocr",
            path,
            [_compact(numbers)],
            password,
            timeout=settings.OCR_TIMEOUT,
            memory_mb=settings.OCR_MEMORY_MB,
            on_record=collect,
        )
    return texts
