"""Run `attachments.pdf.child` processes: page count, text per page (in parallel), OCR.

The parent never parses the PDF itself. Each child gets an address-space cap and the whole
step a wall-clock deadline; a child that overruns is killed and the step fails with a reason
a user can read. Progress is reported page by page through a callback.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import signal
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
    has_image: bool = False
    image_pixels: int = 0  # the largest image's declared width × height (0: no image)
    # A unit of a non-PDF source (attachments.formats.Unit): its citation label and, for a
    # transcript, where it starts.
    label: str = ""
    start_seconds: float | None = None


def _start(mode: str, path: str, pages: str, memory_mb: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "NOTEBOOK_CHILD_MEMORY_MB": str(memory_mb),
        "NOTEBOOK_OCR_DPI": str(settings.OCR_DPI),
        "NOTEBOOK_IMAGE_MAX_PIXELS": str(settings.IMAGE_MAX_PIXELS),
        "NOTEBOOK_THUMBNAIL_SIZE": str(settings.THUMBNAIL_SIZE),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if mode == "text":
        env["OMP_NUM_THREADS"] = "1"  # parallelism comes from our processes, not BLAS threads
    args = [sys.executable, "-m", "attachments.pdf.child", mode, path]
    if pages:
        args.append(pages)
    return subprocess.Popen(  # noqa: S603 - fixed argv, our own module
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=BASE_DIR,
        env=env,
    )


class _Standby:
    """Children started ahead of time (Python up, the parser imported, memory capped), so a
    job does not wait ~0.1 s per child for that. Each child still reads one file only. One
    pool per mode: `text` (pdfminer) and `fast` (PDFium's plain text, the first pass)."""

    def __init__(self, mode: str = "text") -> None:
        self.mode = mode
        self.children: list[subprocess.Popen[bytes]] = []
        self.memory_mb = 0

    def take(self, count: int, memory_mb: int) -> list[subprocess.Popen[bytes]]:
        if memory_mb != self.memory_mb:
            self.discard()
        live = [c for c in self.children if c.poll() is None]
        taken, self.children = live[:count], live[count:]
        return taken + [_start(self.mode, "-", "", memory_mb) for _ in range(count - len(taken))]

    def refill(self, count: int, memory_mb: int) -> None:
        if memory_mb != self.memory_mb:
            self.discard()
        self.memory_mb = memory_mb
        self.children = [c for c in self.children if c.poll() is None]
        while len(self.children) < count:
            self.children.append(_start(self.mode, "-", "", memory_mb))

    def discard(self) -> None:
        for child in self.children:
            child.kill()
            child.wait()
        self.children = []


_standby = _Standby("text")
_fast_standby = _Standby("fast")


def warm_up() -> None:
    """Have EXTRACT_PROCESSES standby children of each kind ready for the next file."""
    _fast_standby.refill(settings.EXTRACT_PROCESSES, settings.EXTRACT_MEMORY_MB)
    _standby.refill(settings.EXTRACT_PROCESSES, settings.EXTRACT_MEMORY_MB)


def _spawn(
    mode: str, path: Path, pages: str, password: str, memory_mb: int
) -> subprocess.Popen[bytes]:
    if mode == "text":
        (proc,) = _standby.take(1, memory_mb)
        job = f"{path}\n{settings.MAX_PDF_PAGES}\n"
    elif mode == "fast":
        (proc,) = _fast_standby.take(1, memory_mb)
        job = f"{path}\n{pages}\n"  # pages: "I K", every K-th page from page I
    else:
        proc = _start(mode, str(path), pages, memory_mb)
        job = ""
    assert proc.stdin is not None
    proc.stdin.write((job + (password or "").replace("\n", " ") + "\n").encode())
    proc.stdin.flush()
    return proc


Send = Callable[[int, str], None]


def _run(
    mode: str,
    path: Path,
    page_groups: list[str],
    password: str,
    *,
    timeout: float,
    memory_mb: int,
    on_record: Callable[[int, dict[str, Any], Send], None],
    on_exit: Callable[[int, Send], None] | None = None,
) -> None:
    """Run one child per page group at once, calling `on_record(child, record, send)` for each
    JSON line as it arrives and `on_exit(child, send)` when a child's output ends; `send`
    writes a line to a child's stdin ("" closes it)."""
    deadline = time.monotonic() + timeout
    procs = [_spawn(mode, path, group, password, memory_mb) for group in page_groups]
    sel = selectors.DefaultSelector()
    buffers: dict[int, bytes] = {}
    errors: list[dict[str, Any]] = []

    def send(index: int, line: str) -> None:
        stdin = procs[index].stdin
        if stdin is None or stdin.closed:
            return
        try:
            if line:
                stdin.write(line.encode() + b"\n")
                stdin.flush()
            else:
                stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the child is gone; its exit status tells why

    try:
        for index, proc in enumerate(procs):
            assert proc.stdout is not None
            if mode != "text":
                send(index, "")
            sel.register(proc.stdout.fileno(), selectors.EVENT_READ, index)
            buffers[index] = b""
        open_streams = len(procs)
        while open_streams:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PdfError(
                    f"Reading the file took longer than {int(timeout)} seconds, so it was "
                    "stopped. The PDF may be damaged or built to be expensive to read."
                )
            for key, _ in sel.select(timeout=min(remaining, 1.0)):
                index = key.data
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    open_streams -= 1
                    if on_exit:
                        on_exit(index, send)
                    continue
                *complete, buffers[index] = (buffers[index] + chunk).split(b"\n")
                for raw in complete:
                    record = json.loads(raw)
                    if "error" in record:
                        errors.append(record)
                    else:
                        on_record(index, record, send)
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
            if proc.stdin and not proc.stdin.closed:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            if proc.stdout:
                proc.stdout.close()
    codes = {proc.returncode for proc in procs}
    kinds = {e["error"] for e in errors}
    if EXIT_PASSWORD in codes or "password" in kinds:
        raise PasswordRequired("This PDF is password-protected.")
    if EXIT_MEMORY in codes or "memory" in kinds:
        raise PdfError(
            f"Reading the file needed more than {memory_mb} MB of memory, so it was stopped. "
            "The PDF may be damaged or built to exhaust memory."
        )
    if crashed := sorted(_signal_name(-c) for c in codes if c < 0):
        # Under the address-space cap, native code that cannot allocate usually crashes.
        raise PdfError(
            f"The PDF reader crashed on this file ({', '.join(crashed)}), most likely for lack "
            f"of memory: the limit is {memory_mb} MB. The PDF may be damaged or built to "
            "exhaust memory."
        )
    if EXIT_DAMAGED in codes or "damaged" in kinds:
        detail = next((e.get("message", "") for e in errors if e["error"] == "damaged"), "")
        raise PdfError(_damaged_message(detail))
    if codes != {0}:
        raise PdfError(f"The PDF reader stopped unexpectedly (exit codes {sorted(codes)}).")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _damaged_message(detail: str) -> str:
    if "EOF" in detail or "trailer" in detail.lower():
        return "The file is damaged or incomplete: it ends before the PDF does. Upload it again."
    return f"The PDF cannot be read; it looks damaged ({detail or 'unknown error'})."


def _compact(pages: list[int]) -> str:
    """Page numbers written as "1-4,7,9-10"."""
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


@dataclass
class Extraction:
    page_count: int
    pages: list[ExtractedPage]


class _PageDealer:
    """Hands pages to text children one at a time as they finish, so no child idles while
    another still has a backlog (pages differ a lot in cost)."""

    AHEAD = 1  # pages queued per child: more would leave one child a tail while the other idles

    def __init__(self, children: int, max_pages: int, on_progress: ProgressCallback | None) -> None:
        self.total: int | None = None
        self.next_page = 1
        self.outstanding = [0] * children
        self.alive = [True] * children
        self.pages: dict[int, ExtractedPage] = {}
        self.max_pages = max_pages
        self.on_progress = on_progress
        self.finished = False

    def _deal(self, child: int, send: Send) -> None:
        assert self.total is not None
        while self.outstanding[child] < self.AHEAD and self.next_page <= self.total:
            send(child, str(self.next_page))
            self.next_page += 1
            self.outstanding[child] += 1
        self._maybe_finish(send)

    def _maybe_finish(self, send: Send) -> None:
        busy = any(o and a for o, a in zip(self.outstanding, self.alive, strict=True))
        done = self.total is not None and self.next_page > self.total and not busy
        if done and not self.finished:
            self.finished = True
            for child in range(len(self.outstanding)):
                send(child, "0")
                send(child, "")

    def on_record(self, child: int, record: dict[str, Any], send: Send) -> None:
        if "page_count" in record:
            if self.total is None:
                self.total = int(record["page_count"])
                limit = f"the limit is {self.max_pages:,}."
                if record.get("over_limit") and self.total <= self.max_pages:
                    raise PdfError(f"The PDF has more than {self.max_pages:,} pages; {limit}")
                if self.total > self.max_pages:
                    raise PdfError(f"The PDF has {self.total:,} pages; {limit}")
            self._deal(child, send)
            return
        number = record["page"]
        lines = [Line(*values) for values in record.get("lines", [])]
        pixels = int(record.get("image_pixels") or 0)
        page = ExtractedPage(
            number, record["text"], lines, has_image=pixels > 0, image_pixels=pixels
        )
        self.pages[number] = page
        self.outstanding[child] -= 1
        if self.on_progress:
            self.on_progress(len(self.pages), self.total or 0)
        self._deal(child, send)

    def on_exit(self, child: int, send: Send) -> None:
        self.alive[child] = False
        self._maybe_finish(send)


def extract_text(
    path: Path,
    password: str = "",
    *,
    expected_pages: int | None = None,
    on_progress: ProgressCallback | None = None,
    processes: int | None = None,
) -> Extraction:
    """Text and line styles of every page, read by up to `processes` children in parallel.

    `expected_pages` (e.g. counted at upload) only decides how many children are worth
    starting; the children's own count is authoritative.
    """
    workers = processes or settings.EXTRACT_PROCESSES
    if expected_pages is not None:
        # A child costs ~0.1 s to start; below ~6 pages each, extra ones do not pay off.
        workers = max(1, min(workers, math.ceil(expected_pages / 6)))
    dealer = _PageDealer(workers, settings.MAX_PDF_PAGES, on_progress)
    try:
        _run(
            "text",
            path,
            [""] * workers,
            password,
            timeout=settings.EXTRACT_TIMEOUT,
            memory_mb=settings.EXTRACT_MEMORY_MB,
            on_record=dealer.on_record,
            on_exit=dealer.on_exit,
        )
    finally:
        # Start the next job's children now, while this job goes on to OCR and embedding.
        warm_up()
    total = dealer.total or 0
    if len(dealer.pages) < total:
        raise PdfError(f"Only {len(dealer.pages)} of {total} pages could be read.")
    return Extraction(total, [dealer.pages[n] for n in range(1, total + 1)])


def fast_text(
    path: Path,
    password: str = "",
    *,
    expected_pages: int | None = None,
    processes: int | None = None,
) -> Extraction:
    """The first pass: every page's plain text as PDFium reads it (no line styles, no layout),
    in a fraction of pdfminer's time, read by up to `processes` children at once, each taking
    every k-th page. Same limits and errors as `extract_text`."""
    workers = processes or settings.EXTRACT_PROCESSES
    if expected_pages is not None:
        workers = max(1, min(workers, math.ceil(expected_pages / 20)))
    counts: list[int] = []
    pages: dict[int, ExtractedPage] = {}

    def collect(child: int, record: dict[str, Any], send: Send) -> None:
        if "page_count" in record:
            counts.append(int(record["page_count"]))
            if counts[-1] > settings.MAX_PDF_PAGES:
                raise PdfError(
                    f"The PDF has {counts[-1]:,} pages; the limit is {settings.MAX_PDF_PAGES:,}."
                )
            return
        pages[record["page"]] = ExtractedPage(record["page"], record["text"])

    try:
        _run(
            "fast",
            path,
            [f"{i + 1} {workers}" for i in range(workers)],
            password,
            timeout=settings.EXTRACT_TIMEOUT,
            memory_mb=settings.EXTRACT_MEMORY_MB,
            on_record=collect,
        )
    finally:
        _fast_standby.refill(settings.EXTRACT_PROCESSES, settings.EXTRACT_MEMORY_MB)
    total = max(counts, default=0)
    if len(pages) < total:
        raise PdfError(f"Only {len(pages)} of {total} pages could be read.")
    return Extraction(total, [pages[n] for n in range(1, total + 1)])


def ocr_pages(
    path: Path,
    numbers: list[int],
    password: str = "",
    *,
    on_progress: ProgressCallback | None = None,
) -> dict[int, str]:
    """OCR text for the given pages (rendered with PDFium, read by RapidOCR), in one child."""
    texts: dict[int, str] = {}

    def collect(child: int, record: dict[str, Any], send: Send) -> None:
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


def ocr_image(path: Path, *, on_progress: ProgressCallback | None = None) -> str:
    """OCR text of an image file (read by RapidOCR in a child, like a scanned page)."""
    texts: dict[int, str] = {}

    def collect(child: int, record: dict[str, Any], send: Send) -> None:
        texts[1] = record["text"]
        if on_progress:
            on_progress(1, 1)

    _run(
        "image",
        path,
        ["1"],
        "",
        timeout=settings.OCR_TIMEOUT,
        memory_mb=settings.OCR_MEMORY_MB,
        on_record=collect,
    )
    return texts.get(1, "")


THUMBNAIL_TIMEOUT = 60  # seconds


def render_thumbnail(path: Path, out: Path, *, kind: str, password: str = "") -> None:
    """Write a WebP thumbnail of the image (`kind` "image") or the PDF's first page ("pdf")
    to `out`, in a child under the extraction memory cap; PdfError when that fails."""
    _run(
        f"thumb-{kind}",
        path,
        [str(out)],
        password,
        timeout=THUMBNAIL_TIMEOUT,
        memory_mb=settings.EXTRACT_MEMORY_MB,
        on_record=lambda child, record, send: None,
    )
