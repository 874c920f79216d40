"""Fair background work: how long one user's PDF waits behind another user's backlog, against
the same PDF with the queue to itself, in the same run (core.jobs).

    .venv/bin/python bench/fairness.py [--notes N] [--workers W] [--pdf url.pdf]
                                       [--json OUT.json] [--keep-data]

Runs against a fresh embedded PostgreSQL in a temporary DATA_DIR (never the dev database) with
a real `manage.py qcluster` of W worker processes, deleted at the end unless --keep-data.

1. **Alone**: a user uploads the PDF; seconds from the upload to `ready`.
2. **Behind a backlog**: another user saves N long notes (each queues its indexing job), then a
   third user uploads the same PDF (not the same user: reuse by hash would make it instant);
   seconds from that upload to `ready`, and how many of the N notes were indexed by then.
   (Its upload also queues the indexing of the note the PDF goes on: that job is the third
   user's too, so it takes that user's first turn, and another of the backlog's notes runs
   before the PDF does.)
3. **The backlog itself**: seconds until all N notes are indexed, so the mean time of one note
   job, and what first in, first out would have added to the PDF's wait (the notes queued
   before it, over the workers).

Prints the wait behind the backlog / the wait alone (fair: about 1 + one note job's share;
first in, first out: grows with N).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `bench` importable
    sys.path.insert(0, str(REPO))

from bench.ingest import log, setup_django, teardown_django  # noqa: E402

DEFAULT_PDFS = REPO.parent / "shared" / "eval" / "pdfs"


def _long_text(n: int) -> str:
    """About 27 KB of distinct sentences: a note whose vectors take its worker a few seconds."""
    return " ".join(
        f"Entry {n}.{i} records that sample {i * 7 % 101} of batch {n} measured {i * 13 % 997} "
        f"units after {i % 17} hours at station {i % 23}."
        for i in range(300)
    )


def _upload(username: str, pdf: Path) -> Any:
    from django.contrib.auth import get_user_model
    from django.core.files.uploadedfile import SimpleUploadedFile

    from attachments.services import attachment_upload
    from notes.services import note_create, notebook_create

    user = get_user_model().objects.create_user(username=username, password=None)
    note = note_create(notebook=notebook_create(owner=user, title="Bench"), author=user)
    return attachment_upload(
        user=user,
        note=note,
        uploaded=SimpleUploadedFile(pdf.name, pdf.read_bytes(), "application/pdf"),
    )


def _wait_ready(attachment_id: int, worker: subprocess.Popen[bytes], timeout: float) -> float:
    from attachments.models import NoteAttachment

    deadline = time.monotonic() + timeout
    while True:
        status = NoteAttachment.objects.values_list("status", flat=True).get(pk=attachment_id)
        if status == NoteAttachment.Status.READY:
            return time.monotonic()
        if status == NoteAttachment.Status.FAILED or worker.poll() is not None:
            raise RuntimeError(f"attachment {attachment_id}: {status}, worker {worker.poll()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"attachment {attachment_id} not ready after {timeout} s")
        time.sleep(0.05)


def _indexed(note_ids: list[int]) -> int:
    from notes.models import Note

    return Note.objects.filter(pk__in=note_ids).exclude(embedding_model="").count()


def run(notes: int, workers: int, pdf: Path) -> dict[str, Any]:
    from django.db import connection

    from notebook.database import database_url
    from notes.services import note_create, notebook_create

    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "WORKERS": str(workers),
        "GUIDE_NOTEBOOK_DELAY": "3600",  # guides of the uploads do not join the measured queue
    }
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        log("warming the worker up (a first upload, not timed)")
        warm = _upload("bench-warm", pdf)
        _wait_ready(warm.pk, worker, 600)

        log("1. the PDF alone")
        started = time.monotonic()
        alone = _upload("bench-alone", pdf)
        alone_s = _wait_ready(alone.pk, worker, 600) - started

        log(f"2. the PDF behind {notes} long notes of another user")
        from django.contrib.auth import get_user_model

        flooder = get_user_model().objects.create_user(username="bench-flood", password=None)
        book = notebook_create(owner=flooder, title="Backlog")
        flood_started = time.monotonic()
        note_ids = [
            note_create(notebook=book, author=flooder, title=f"Log {n}", body=_long_text(n)).pk
            for n in range(notes)
        ]
        indexed_at_upload = _indexed(note_ids)
        started = time.monotonic()
        behind = _upload("bench-behind", pdf)
        behind_s = _wait_ready(behind.pk, worker, 1800) - started
        indexed_by_then = _indexed(note_ids)

        log("3. the rest of the backlog")
        deadline = time.monotonic() + 3600
        while _indexed(note_ids) < notes:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("the backlog did not finish")
            time.sleep(0.1)
        backlog_s = time.monotonic() - flood_started
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
    # Worker time of the backlog, less the PDF's own run (it took a worker meanwhile), per note.
    note_s = max(backlog_s * workers - alone_s, 0) / notes
    return {
        "notes": notes,
        "workers": workers,
        "pdf": pdf.name,
        "alone_s": round(alone_s, 2),
        "behind_backlog_s": round(behind_s, 2),
        "ratio": round(behind_s / alone_s, 2),
        "notes_indexed_at_its_upload": indexed_at_upload,
        "notes_indexed_before_the_pdf": indexed_by_then,
        "backlog_s": round(backlog_s, 2),
        "note_job_s": round(note_s, 2),
        "fifo_would_add_s": round(notes * note_s / workers, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=12)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--pdf", default="url.pdf")
    parser.add_argument("--pdfs", type=Path, default=DEFAULT_PDFS)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep-data", action="store_true")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="notebook-bench-fairness-"))
    try:
        setup_django(data_dir)
        result = run(args.notes, args.workers, args.pdfs / args.pdf)
    finally:
        teardown_django(data_dir, keep=args.keep_data)
        if not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
    print(
        f"{result['pdf']} alone: {result['alone_s']:.1f} s to ready; behind another user's "
        f"{result['notes']} long notes ({result['workers']} worker(s)): "
        f"{result['behind_backlog_s']:.1f} s = {result['ratio']:.2f}× alone, with "
        f"{result['notes_indexed_before_the_pdf']} of the notes indexed by then "
        f"({result['notes_indexed_at_its_upload']} at its upload).\n"
        f"One note job ≈ {result['note_job_s']:.1f} s; first in, first out would have added "
        f"≈ {result['fifo_would_add_s']:.0f} s (the whole backlog took "
        f"{result['backlog_s']:.1f} s)."
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
