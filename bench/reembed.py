"""A background re-embedding of a large notebook, while search goes on: how long it takes
against the embedding floor, what it costs searches meanwhile, and how long the switch holds
the vector tables.

    .venv/bin/python bench/reembed.py --data-dir DIR [--to-runtime onnx-int8] [--workers 2]
        [--rounds R] [--back] [--json OUT.json]

DIR is a data directory `bench/two_level.py --data-dir DIR` built (about a thousand ready
documents in one notebook); nothing is ingested here.

1. Before: every answerable question of both evaluation sets searched over the whole notebook
   (hybrid, as the search page does) --rounds times; p50 and p95, and each question's top 5.
   The settings must name the runtime the notebook's vectors come from (EMBEDDING_QUANTIZE).
2. The build (`vectors_next.build_start`, the bundled model on --to-runtime, int8 by default:
   the switch an install makes to embed 3-5x faster), run by --workers processes that take
   only the build's jobs, as django-q2's workers would (`core.jobs.job_run`); meanwhile this
   process searches the same questions, one every --pace seconds (users asking). Reported:
   the build's seconds, as a ratio to its embedding floor (every window it embedded, at the
   target's windows/s measured here alone, one process on every core); search p50/p95
   during the build as ratios to before; the share of searches whose top 5 was the one
   before (the live vectors answer).
3. The switch (`vectors_next.switch`, the settings overridden to name the target), timed,
   with a thread searching throughout: the longest search during it.
4. With --back, the same build back to the original runtime and its switch, so that DIR
   holds what it held (not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `bench` importable
    sys.path.insert(0, str(REPO))

from bench.ingest import log, setup_django, teardown_django  # noqa: E402
from bench.two_level import SETS, _percentile  # noqa: E402

QUESTIONS_PER_ROUND_WARMUP = 5


def questions() -> list[str]:
    from search.evaluation import load_questions

    found: list[str] = []
    for root in SETS:
        found += [q.question for q in load_questions(root / "questions.jsonl") if q.answerable]
    return found


def searcher() -> Any:
    """search(question) → (seconds, top-5 chunk ids) over the bench notebook."""
    from django.contrib.auth import get_user_model

    from notes.models import Notebook
    from search.retrieval import Scope, search

    user = get_user_model().objects.get(username="bench-two-level")
    notebook = Notebook.objects.filter(owner=user).first()
    if notebook is None:
        raise SystemExit("No bench notebook here: build it with bench/two_level.py --data-dir.")
    scope = Scope(notebook_id=notebook.pk, include_notes=False)

    def run(text: str) -> tuple[float, tuple[int, ...]]:
        started = time.perf_counter()
        found = search(user=user, query=text, scope=scope, limit=5, rerank=False)
        return time.perf_counter() - started, tuple(h.chunk.pk for h in found.hits if h.chunk)

    return run


def worker(data_dir: Path) -> None:
    """Take the build's jobs until none is left (one of the bench's worker processes)."""
    from django.db import transaction
    from django.utils import timezone

    from attachments.services import vectors_next
    from core.jobs import job_run
    from core.models import Job

    funcs = [vectors_next.SOURCE_TASK, vectors_next.NOTES_TASK]
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 5:
        with transaction.atomic():
            job = (
                Job.objects.select_for_update(skip_locked=True)
                .filter(func__in=funcs, state=Job.State.PENDING)
                .order_by("pk")
                .first()
            )
            if job is not None:
                job.state, job.started_at = Job.State.RUNNING, timezone.now()
                job.attempts += 1
                job.save(update_fields=["state", "started_at", "attempts"])
        if job is None:
            time.sleep(0.2)
            continue
        job_run(job)
        idle_since = time.monotonic()


def floor(config: Any) -> float:
    """Windows per second of the target embedder alone, in this process (a sample of the
    notebook's chunks, one call): ONNX Runtime's threads use every core, so this is the
    machine's rate, whatever the number of workers sharing it."""
    from attachments.models import DocumentChunk
    from core import embeddings

    embedder = embeddings.embedder_for(config)
    sample = list(DocumentChunk.objects.order_by("pk").values_list("content", flat=True)[:256])
    windows = [w for text in sample for w in embedder.windows(text)]
    embedder.embed(windows[:16])  # loaded and warm
    started = time.perf_counter()
    embedder.embed(windows)
    return len(windows) / (time.perf_counter() - started)


def build(runtime: str, workers: int, data_dir: Path, search: Any, asked: list[str],
          before: dict[str, tuple[int, ...]], pace: float) -> dict[str, Any]:  # fmt: skip
    from django.conf import settings

    from attachments.models import VectorBuild
    from attachments.services import vectors_next
    from core import embeddings

    config = embeddings.config_of(
        "local", settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS, "", runtime
    )
    per_s = floor(config)
    started = time.perf_counter()
    made = vectors_next.build_start(
        backend="local", model=settings.EMBEDDING_MODEL,
        dimensions=settings.EMBEDDING_DIMENSIONS, base_url="", runtime=runtime,
    )  # fmt: skip
    procs = [
        subprocess.Popen(  # noqa: S603 - our interpreter, this script
            [sys.executable, __file__, "--worker", "--data-dir", str(data_dir)]
        )
        for _ in range(workers)
    ]
    seconds: list[float] = []
    same = total = 0

    def building() -> bool:
        return VectorBuild.objects.filter(pk=made.pk, state="building").exists()

    while building():
        for text in asked:
            took, top = search(text)
            seconds.append(took)
            same += top == before[text]
            total += 1
            time.sleep(max(0.0, pace - took))  # users asking, not a search loop hogging a core
        if all(p.poll() is not None for p in procs) and building():
            raise RuntimeError("the workers stopped before the build was complete")
    built = time.perf_counter() - started
    for proc in procs:
        proc.wait()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {vectors_next.CHUNKS.next}")  # noqa: S608
        windows = int(cursor.fetchone()[0])
    return {
        "build": made,
        "config": config,
        "seconds": round(built, 1),
        "windows": windows,
        "floor_windows_per_s": round(per_s, 1),
        "floor_s": round(windows / per_s, 1),
        "ratio_to_floor": round(built / (windows / per_s), 3),
        "searches": total,
        "same_top5": round(same / total, 4) if total else None,
        "p50_ms": round(1000 * _percentile(seconds, 0.5), 1),
        "p95_ms": round(1000 * _percentile(seconds, 0.95), 1),
    }


def switch(config: Any, search: Any, asked: list[str]) -> dict[str, Any]:
    """Switch with the settings naming `config`, a thread searching meanwhile."""
    from django.db import connections
    from django.test import override_settings

    from attachments.services import vectors_next

    backend, model, dimensions, _url, _key, runtime = config
    longest: list[float] = []
    stop = threading.Event()

    def keep_searching() -> None:
        try:
            while not stop.is_set():
                for text in asked:
                    longest.append(search(text)[0])
                    if stop.is_set():
                        break
        finally:
            connections.close_all()

    thread = threading.Thread(target=keep_searching)
    with override_settings(
        EMBEDDING_BACKEND=backend, EMBEDDING_MODEL=model, EMBEDDING_DIMENSIONS=dimensions,
        EMBEDDING_QUANTIZE=runtime == "onnx-int8",
    ):  # fmt: skip
        thread.start()
        time.sleep(2)
        started = time.perf_counter()
        done = vectors_next.switch()
        took = time.perf_counter() - started
        time.sleep(2)
        stop.set()
        thread.join()
    return {
        "result": done,
        "seconds": round(took, 3),
        "searches_meanwhile": len(longest),
        "longest_search_ms": round(1000 * max(longest), 1) if longest else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, required=True, help="bench/two_level.py's")
    parser.add_argument("--to-runtime", default="onnx-int8", choices=("onnx", "onnx-int8"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="search rounds before the build")
    parser.add_argument("--back", action="store_true", help="re-embed back afterwards")
    parser.add_argument(
        "--pace", type=float, default=1.0, help="seconds between searches during the build"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    data_dir = args.data_dir if args.worker else args.data_dir / "data"
    os.environ["DEBUG"] = "0"
    setup_django(data_dir)
    try:
        if args.worker:
            worker(data_dir)
            return 0
        from core.embeddings import local_runtime

        original = local_runtime()
        if original == args.to_runtime:
            raise SystemExit(f"The settings run {original} already; pick another --to-runtime.")
        search, asked = searcher(), questions()
        for text in asked[:QUESTIONS_PER_ROUND_WARMUP]:
            search(text)
        seconds: list[float] = []
        before: dict[str, tuple[int, ...]] = {}
        for _ in range(args.rounds):
            for text in asked:
                took, before[text] = search(text)
                seconds.append(took)
        report: dict[str, Any] = {
            "questions": len(asked),
            "before": {
                "p50_ms": round(1000 * _percentile(seconds, 0.5), 1),
                "p95_ms": round(1000 * _percentile(seconds, 0.95), 1),
            },
        }
        log(f"before: {report['before']}; building with {args.to_runtime}")
        during = build(args.to_runtime, args.workers, data_dir, search, asked, before, args.pace)
        config = during.pop("config")
        during.pop("build")
        during["p50_ratio"] = round(during["p50_ms"] / report["before"]["p50_ms"], 3)
        during["p95_ratio"] = round(during["p95_ms"] / report["before"]["p95_ms"], 3)
        report["during"] = during
        log(f"during: {during}")
        report["switch"] = switch(config, search, asked)
        log(f"switch: {report['switch']}")
        if args.back:
            back = build(original, args.workers, data_dir, search, asked, before, args.pace)
            report["back"] = switch(back["config"], search, asked)["result"]
        print_report(report, args)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
    finally:
        teardown_django(data_dir, keep=True)
    return 0


def print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    before, during, switched = report["before"], report["during"], report["switch"]
    print(f"Background re-embedding to {args.to_runtime}, {args.workers} worker processes; "
          f"{report['questions']} questions searched throughout (hybrid)")  # fmt: skip
    print(
        f"build: {during['seconds']} s for {during['windows']} windows; floor "
        f"{during['floor_s']} s ({during['floor_windows_per_s']} windows/s) = "
        f"{during['ratio_to_floor']}x the floor"
    )
    print(
        f"search before: p50 {before['p50_ms']} ms, p95 {before['p95_ms']} ms; during: p50 "
        f"{during['p50_ms']} ms ({during['p50_ratio']}x), p95 {during['p95_ms']} ms "
        f"({during['p95_ratio']}x); {during['searches']} searches, top 5 as before: "
        f"{100 * (during['same_top5'] or 0):.1f} %"
    )
    print(
        f"switch: {switched['result']} in {switched['seconds']} s; the longest of "
        f"{switched['searches_meanwhile']} searches around it took "
        f"{switched['longest_search_ms']} ms"
    )


if __name__ == "__main__":
    raise SystemExit(main())
