"""Studio outputs written offline over the evaluation PDFs in one notebook: seconds to write
each kind (median of --repeat runs), per 100 pages, and as a ratio to the baseline measured
in the same run (plain pdfminer `extract_text` of the same PDFs, one interpreter per file);
how many statements each holds, the share whose citation quote is found on its page (must be
100 %), and how many quote boilerplate (licence, contents or index text: search.boilerplate
on the cited passages, and contents-like quotes).

    .venv/bin/python bench/studio.py [--pdfs DIR] [--files a.pdf,b.pdf] [--repeat 3]
                                     [--kinds briefing,...] [--json OUT.json] [--keep-data]

Runs against a fresh embedded PostgreSQL in a temporary DATA_DIR (never the dev database),
deleted at the end unless --keep-data. Ingestion and the embedding model's loading are not
timed. Encrypted, scanned and truncated variants of the evaluation PDFs are left out by
default (they repeat url.pdf, R-data.pdf and natbib.pdf)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
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

from bench.ingest import _baseline_once, _warm_embedder, log, setup_django, teardown_django  # noqa: E402

DEFAULT_PDFS = REPO.parent / "shared" / "eval" / "pdfs"
SKIP = re.compile(r"password|scanned|encrypted|truncated", re.IGNORECASE)
MARKER = re.compile(r"\[(\d{1,3})\]")


def _statements(content: dict[str, Any]) -> list[tuple[str, bool]]:
    """(text, shown as fact) of every item and mind map node."""

    def walk(item: dict[str, Any]) -> list[tuple[str, bool]]:
        own = [(str(item[k]), bool(item.get("cited", True))) for k in ("text", "back")
               if isinstance(item.get(k), str) and item[k]]  # fmt: skip
        return own + [s for child in item.get("children") or [] for s in walk(child)]

    return [s for section in content.get("sections") or [] for item in section["items"]
            for s in walk(item)]  # fmt: skip


def _check(content: dict[str, Any]) -> dict[str, Any]:
    from attachments.models import DocumentPage
    from grounding.citations import normalise, quotable
    from search.boilerplate import boilerplate_chunks, contents_like

    citations = {int(c["n"]): c for c in content.get("citations") or []}
    facts = [text for text, cited in _statements(content) if cited]
    verified = 0
    for text in facts:
        numbers = [int(n) for n in MARKER.findall(text)]
        ok = bool(numbers)
        for n in numbers:
            c = citations.get(n)
            if c is None:
                ok = False
                continue
            if c.get("kind") == "note":  # the bench's notebook has no written notes
                continue
            page = (
                DocumentPage.objects.filter(attachment_id=c["attachment_id"], number=c["page"])
                .values_list("text", flat=True)
                .first()
            )
            ok = ok and bool(page) and normalise(c["quote"]) in quotable(page or "")
        verified += ok
    chunks = [int(c["chunk_id"]) for c in citations.values() if c.get("chunk_id")]
    flagged = boilerplate_chunks(chunks)
    boiler = sum(
        1
        for c in citations.values()
        if c.get("chunk_id") in flagged or contents_like(str(c.get("quote", "")))
    )
    return {"statements": len(facts), "verified": verified, "citations": len(citations),
            "boilerplate_quotes": boiler}  # fmt: skip


def _speak_all(output_id: int) -> None:
    """Run an audio overview's queued speech slices in turn (each is a job of its own)."""
    from core.models import Job
    from studio import services
    from studio.services.audio import TASK

    while True:
        job = Job.objects.filter(func=TASK, args__0=output_id, state=Job.State.PENDING).first()
        if job is None:
            return
        Job.objects.filter(pk=job.pk).update(state=Job.State.DONE)
        services.output_speak(output_id=int(job.args[0]), token=int(job.args[1]))


def run(files: list[Path], kinds: list[str], repeat: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.core.files.uploadedfile import SimpleUploadedFile

    from attachments.services import attachment_ingest, attachment_upload
    from notes.services import note_create, notebook_create
    from studio import services
    from studio.models import StudioOutput

    log("loading the embedding model (not timed)")
    _warm_embedder()
    user = get_user_model().objects.create_user(username="bench-studio", password=None)
    book = notebook_create(owner=user, title="Evaluation manuals")
    note = note_create(notebook=book, author=user, title="", body="")
    pages = 0
    for path in files:
        log(f"ingesting {path.name} (not timed)")
        attachment = attachment_upload(user=user, note=note, uploaded=SimpleUploadedFile(
            path.name, path.read_bytes(), "application/pdf"))  # fmt: skip
        attachment_ingest(attachment_id=attachment.pk)
        attachment.refresh_from_db()
        if attachment.status != "ready":
            raise RuntimeError(f"{path.name}: {attachment.status} {attachment.error}")
        pages += attachment.page_count or 0
    log("baseline: pdfminer extract_text of every file, a fresh interpreter each")
    baseline = sum(_baseline_once(path)[0] for path in files)
    rows = []
    for kind in kinds:
        times: list[float] = []
        checked: dict[str, Any] = {}
        for round_ in range(repeat):
            output = services.output_create(user=user, notebook_id=book.pk, kind=kind)
            started = time.perf_counter()
            services.output_write(output_id=output.pk, token=output.token)
            _speak_all(output.pk)  # an audio overview's further slices, as a worker runs them
            seconds = time.perf_counter() - started
            output.refresh_from_db()
            if output.status != StudioOutput.Status.READY:
                raise RuntimeError(f"{kind}: {output.status} {output.error}")
            times.append(seconds)
            checked = _check(output.content)
            if kind == StudioOutput.Kind.AUDIO:
                spoken = float(output.content["audio"]["seconds"])
                checked.update(audio_s=round(spoken, 1), real_time=round(spoken / seconds, 1))
            log(f"{kind} round {round_ + 1}: {seconds:.2f}s {checked}")
        median = statistics.median(times)
        rows.append({"kind": kind, "seconds": [round(t, 2) for t in times],
                     "median_s": round(median, 2),
                     "per_100_pages_s": round(100 * median / pages, 2) if pages else None,
                     "ratio": round(median / baseline, 3) if baseline else None,
                     **checked})  # fmt: skip
    return {"pages": pages, "files": [f.name for f in files],
            "baseline_pdfminer_s": round(baseline, 2), "rows": rows}  # fmt: skip


def print_result(result: dict[str, Any], repeat: int) -> None:
    print(f"== Studio, offline: {len(result['files'])} PDFs, {result['pages']} pages; "
          f"median of {repeat} ==")  # fmt: skip
    print(f"baseline: pdfminer extract_text of the same PDFs, {result['baseline_pdfminer_s']:.2f}s")
    print(f"{'kind':<13}{'median s':>9}{'/100 pp':>9}{'ratio':>8}{'stmts':>7}{'verified':>10}"
          f"{'cites':>7}{'boiler':>8}")  # fmt: skip
    for r in result["rows"]:
        share = f"{100 * r['verified'] / r['statements']:.0f} %" if r["statements"] else "-"
        timing = f"{r['median_s']:>9.2f}{r['per_100_pages_s']:>9.2f}{r['ratio']:>8.3f}"
        counts = f"{r['statements']:>7}{share:>10}{r['citations']:>7}{r['boilerplate_quotes']:>8}"
        print(f"{r['kind']:<13}{timing}{counts}")
    for r in result["rows"]:
        if "audio_s" in r:
            print(f"{r['kind']}: {r['audio_s']:.0f} s of speech, spoken {r['real_time']:.1f}x "
                  "faster than real time (writing included)")  # fmt: skip
    print("ratio = seconds to write / seconds pdfminer takes to extract the same PDFs (this run)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdfs", type=Path, default=DEFAULT_PDFS)
    parser.add_argument("--files", default="", help="comma-separated names (default: all)")
    parser.add_argument("--kinds", default="", help="comma-separated kinds (default: all)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep-data", action="store_true")
    args = parser.parse_args(argv)
    if args.files:
        files = [args.pdfs / name.strip() for name in args.files.split(",") if name.strip()]
    else:
        files = sorted(p for p in args.pdfs.glob("*.pdf") if not SKIP.search(p.name))
    missing = [f for f in files if not f.exists()]
    if missing or not files:
        parser.error(f"missing: {', '.join(map(str, missing)) or args.pdfs}")
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()] or [
        "briefing", "study_guide", "faq", "timeline", "mind_map", "flashcards", "quiz", "audio"
    ]  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="bench-studio-"))
    work.chmod(0o755)  # as root the embedded server runs as another user and must get in
    data_dir = work / "data"
    report: dict[str, Any] = {
        "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version()},
    }
    try:
        log(f"fresh database in {data_dir}")
        setup_django(data_dir)
        report["studio"] = run(files, kinds, args.repeat)
    finally:
        if "django" in sys.modules:
            teardown_django(data_dir, keep=args.keep_data)
        if not args.keep_data:
            shutil.rmtree(work, ignore_errors=True)
    print(f"Studio bench: {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print_result(report["studio"], args.repeat)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
