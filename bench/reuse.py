"""Reuse by hash: seconds to ready of a PDF its owner already has ingested (attached again to
another note: its rows are copied) against a first ingestion of the same PDF, in the same run.

    .venv/bin/python bench/reuse.py [--pdfs DIR] [--files R-intro.pdf,…] [--repeat N]
                                    [--json OUT.json] [--keep-data]

Runs against a fresh embedded PostgreSQL in a temporary DATA_DIR (never the dev database),
deleted at the end unless --keep-data. The embedding model is loaded before anything is timed.
Per file and round, a fresh user uploads the PDF to a note and `attachment_ingest` runs it as
the worker does (the baseline: extract → OCR → chunk → embed); then the same user uploads the
same bytes to a note of another notebook and the run copies the first one's rows instead.
Each time is upload + run until `ready`, without the queue's wait. Figures (medians over the
rounds) go to stdout with the ratio reused / first; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `bench` importable
    sys.path.insert(0, str(REPO))

from bench.ingest import _warm_embedder, log, setup_django, teardown_django  # noqa: E402

DEFAULT_PDFS = REPO.parent / "shared" / "eval" / "pdfs"
DEFAULT_FILES = "R-intro.pdf"


def _to_ready(user: Any, note: Any, path: Path) -> tuple[float, Any]:
    """Seconds from the upload to `ready`, and the attachment."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from attachments.services import attachment_ingest, attachment_upload

    started = time.perf_counter()
    attachment = attachment_upload(
        user=user,
        note=note,
        uploaded=SimpleUploadedFile(path.name, path.read_bytes(), "application/pdf"),
    )
    attachment_ingest(attachment_id=attachment.pk)
    seconds = time.perf_counter() - started
    attachment.refresh_from_db()
    if attachment.status != "ready":
        raise RuntimeError(f"{path.name}: {attachment.status} {attachment.error}")
    return seconds, attachment


def run(files: list[Path], repeat: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from attachments.models import ChunkVector, DocumentChunk, PostingList
    from notes.services import note_create, notebook_create

    log("loading the embedding model (not timed)")
    model_s = _warm_embedder()
    rows = []
    for path in files:
        firsts: list[float] = []
        reuses: list[float] = []
        copies: list[float] = []
        counts: dict[str, int] = {}
        for round_ in range(repeat):
            user = get_user_model().objects.create_user(
                username=f"bench-{path.stem}-{round_}", password=None
            )
            notes = [
                note_create(
                    notebook=notebook_create(owner=user, title=f"Notebook {n}"),
                    author=user,
                    title=f"Note {n}",
                )
                for n in (1, 2)
            ]
            log(f"{path.name} round {round_ + 1}: first ingestion")
            first_s, first = _to_ready(user, notes[0], path)
            if "reused_from" in first.timings:
                raise RuntimeError("the baseline was reused: a fresh user should have none")
            log(f"{path.name}: first ready in {first_s:.2f}s {first.timings}")
            reuse_s, again = _to_ready(user, notes[1], path)
            if again.timings.get("reused_from") != first.pk:
                raise RuntimeError(f"not reused: {again.timings}")
            log(f"{path.name}: reused copy ready in {reuse_s:.3f}s {again.timings}")
            firsts.append(first_s)
            reuses.append(reuse_s)
            copies.append(float(again.timings["reuse"]))
            counts = {
                "pages": again.page_count or 0,
                "chunks": DocumentChunk.objects.filter(attachment=again).count(),
                "vectors": ChunkVector.objects.filter(attachment=again).count(),
                "posting_lists": PostingList.objects.filter(attachment=again).count(),
            }
        first_med, reuse_med = statistics.median(firsts), statistics.median(reuses)
        rows.append(
            {
                "file": path.name,
                **counts,
                "first_s": [round(x, 3) for x in firsts],
                "reused_s": [round(x, 3) for x in reuses],
                "copy_s": [round(x, 3) for x in copies],
                "first_median_s": round(first_med, 3),
                "reused_median_s": round(reuse_med, 3),
                "ratio": round(reuse_med / first_med, 4) if first_med else None,
                "speedup": round(first_med / reuse_med, 1) if reuse_med else None,
            }
        )
    return {"model_load_s": round(model_s, 3), "rows": rows}


def print_result(result: dict[str, Any], repeat: int) -> None:
    print(f"== Reuse by hash: seconds to ready (upload + run), median of {repeat} ==")
    print(
        f"{'file':<24}{'pages':>6}{'chunks':>7}{'vectors':>8}{'lists':>7}"
        f"{'first s':>9}{'reused s':>10}{'copy s':>8}{'ratio':>8}{'speedup':>9}"
    )
    for row in result["rows"]:
        print(
            f"{row['file']:<24}{row['pages']:>6}{row['chunks']:>7}{row['vectors']:>8}"
            f"{row['posting_lists']:>7}{row['first_median_s']:>9.2f}{row['reused_median_s']:>10.3f}"
            f"{statistics.median(row['copy_s']):>8.3f}{row['ratio']:>8.4f}{row['speedup']:>8.1f}x"
        )
    print("ratio = reused / first (the baseline: a first ingestion of the same file, this run)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdfs", type=Path, default=DEFAULT_PDFS)
    parser.add_argument("--files", default=DEFAULT_FILES, help="comma-separated names")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep-data", action="store_true")
    args = parser.parse_args(argv)
    files = [args.pdfs / name.strip() for name in args.files.split(",") if name.strip()]
    missing = [f for f in files if not f.exists()]
    if missing:
        parser.error(f"missing: {', '.join(map(str, missing))}")
    work = Path(tempfile.mkdtemp(prefix="bench-reuse-"))
    work.chmod(0o755)  # as root the embedded server runs as another user and must get in
    data_dir = work / "data"
    report: dict[str, Any] = {
        "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version()},
        "files": [f.name for f in files],
    }
    try:
        log(f"fresh database in {data_dir}")
        setup_django(data_dir)
        report["reuse"] = run(files, args.repeat)
    finally:
        if "django" in sys.modules:
            teardown_django(data_dir, keep=args.keep_data)
        if not args.keep_data:
            shutil.rmtree(work, ignore_errors=True)
    print(f"Reuse bench: {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print_result(report["reuse"], args.repeat)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
