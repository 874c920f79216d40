"""The first search right after the web process starts: with the start-up warm-up (keywords
only while the embedding model loads) against without it (the search waits for the load).

    .venv/bin/python bench/first_search.py [--repeat N] [--pdf url.pdf] [--json OUT.json]
        [--keep-data]

Runs against a fresh embedded PostgreSQL in a temporary DATA_DIR (never the dev database),
deleted at the end unless --keep-data. One PDF goes through the real pipeline; then, --repeat
times and alternating, a fresh interpreter imports notebook.asgi as a server does at start
(Django set up; with EMBEDDING_WARM_UP=1 the warm-up thread starts) and at once times one
hybrid `search()`, then the time until the model is ready, then one more (warm) search.
Figures go to stdout as medians with ratios to the baseline from the same run: the first
search without the warm-up (what every first search cost before). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
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
QUERY = "How can I print web addresses in the same font as the surrounding text?"
# The third is a reference: a keyword-only first search with no model anywhere (what the first
# search costs in a fresh process by itself: Django's and the language detector's first use).
VARIANTS = ("warm-up", "no warm-up", "keywords only, no model")


def child(user_id: int, mode: str) -> None:
    """In a fresh interpreter: start as a server does, then time the searches."""
    started = time.perf_counter()
    # As a server starts: Django set up, and the warm-up thread when EMBEDDING_WARM_UP is on.
    importlib.import_module("notebook.asgi")
    from django.contrib.auth.models import User

    from core.embeddings import warming_up
    from search.retrieval import search

    user = User.objects.get(pk=user_id)
    ready = time.perf_counter()
    first = search(user=user, query=QUERY, mode=mode)  # type: ignore[arg-type]
    first_ms = (time.perf_counter() - ready) * 1000
    while warming_up():
        time.sleep(0.05)
    model_ready_s = time.perf_counter() - ready
    began = time.perf_counter()
    warm = search(user=user, query=QUERY, mode=mode)  # type: ignore[arg-type]
    warm_ms = (time.perf_counter() - began) * 1000
    print(json.dumps({
        "startup_s": ready - started,
        "first_ms": first_ms,
        "first_stages_ms": {k: round(v * 1000) for k, v in first.timings.items()},
        "first_warming_up": bool(first.info.get("warming_up")),
        "first_hits": len(first.hits),
        "model_ready_s": model_ready_s,
        "warm_ms": warm_ms,
        "warm_vector_leg": "embed_query" in warm.timings or mode == "lexical",
    }))  # fmt: skip


def run_child(variant: str, user_id: int, database_url: str) -> dict[str, Any]:
    mode = "lexical" if variant.startswith("keywords") else "hybrid"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "notebook.settings",
        "EMBEDDING_WARM_UP": "1" if variant == "warm-up" else "0",
    }
    done = subprocess.run(  # noqa: S603 - our own interpreter and script
        [sys.executable, __file__, "--child", str(user_id), "--mode", mode], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the {variant} child failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def prepare(pdf: Path) -> int:
    """A user with one ingested PDF; their id."""
    from django.contrib.auth.models import User
    from django.core.files.uploadedfile import SimpleUploadedFile

    from attachments.services import attachment_ingest, attachment_upload
    from notes.services import note_create, notebook_create

    user = User.objects.create_user(username="bench")  # never logs in
    notebook = notebook_create(owner=user, title="Bench")
    note = note_create(notebook=notebook, author=user, title="Bench", body="")
    uploaded = SimpleUploadedFile(pdf.name, pdf.read_bytes(), "application/pdf")
    attachment = attachment_upload(user=user, note=note, uploaded=uploaded)
    attachment_ingest(attachment_id=attachment.pk)
    return int(user.pk)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per variant")
    parser.add_argument("--pdf", type=Path, default=DEFAULT_PDFS / "url.pdf")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--keep-data", action="store_true", help="keep the temporary DATA_DIR")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="hybrid", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child, args.mode)
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-first-search-"))
    work.chmod(0o755)  # as root the embedded server runs as another user and must get in
    data_dir = work / "data"
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    try:
        setup_django(data_dir)
        from django.conf import settings
        from django.db import connections

        from notebook.database import database_url

        log(f"ingesting {args.pdf.name}")
        user_id = prepare(args.pdf)
        url = database_url(settings.DATABASES["default"])
        connections.close_all()
        for i in range(args.repeat):
            order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]  # none always goes first
            for variant in order:
                runs[variant].append(run_child(variant, user_id, url))
                log(f"{variant} #{i + 1}: {runs[variant][-1]}")
    finally:
        teardown_django(data_dir, keep=args.keep_data)
    report = _report(runs)
    report["machine"] = {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                         "load_average": os.getloadavg()}  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({**report, "runs": runs}, indent=2))
    return 0


def _report(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def median(variant: str, key: str) -> float:
        return float(statistics.median(run[key] for run in runs[variant]))

    baseline = median("no warm-up", "first_ms")
    figures = {
        "first_search_with_warm_up_ms": median("warm-up", "first_ms"),
        "first_search_without_warm_up_ms": baseline,
        "warm_search_ms": median("warm-up", "warm_ms"),
        "keywords_only_first_ms": median("keywords only, no model", "first_ms"),
        "model_ready_after_start_s": median("warm-up", "model_ready_s"),
        "first_with_warm_up_was_keyword_only": all(r["first_warming_up"] for r in runs["warm-up"]),
        "warm_search_used_vectors": all(r["warm_vector_leg"] for r in runs["warm-up"]),
    }
    n = len(runs["warm-up"])
    print(f"First search right after start, median of {n} fresh processes each:")
    print(f"{'':44}{'ms':>9}{'vs baseline':>13}")
    for label, value in (
        ("without warm-up (waits for the model)", baseline),
        ("with warm-up (keywords only, model loading)", figures["first_search_with_warm_up_ms"]),
        ("once the model is in (hybrid)", figures["warm_search_ms"]),
        ("reference: keywords only, no model at all", figures["keywords_only_first_ms"]),
    ):
        print(f"{label:44}{value:9.0f}{value / baseline:12.3f}x")
    print(f"model ready {figures['model_ready_after_start_s']:.1f} s after start (warm-up)")
    print(f"every first search with warm-up keyword-only: "
          f"{figures['first_with_warm_up_was_keyword_only']}; warm searches used vectors: "
          f"{figures['warm_search_used_vectors']}")  # fmt: skip
    print(f"load average: {os.getloadavg()[0]:.2f}")
    return figures


if __name__ == "__main__":
    sys.exit(main())
