"""Two-level search on a notebook of about a thousand documents, against one-level search.

    .venv/bin/python bench/two_level.py [--documents N] [--keep 10,20,50] [--repeat R]
        [--data-dir DIR] [--json OUT.json] [--max-seconds S]

1. Corpus: one notebook holding the PDFs of both evaluation sets (../shared/eval/pdfs and
   eval/heldout/pdfs; encrypted ones opened with their README's password) and distractor
   documents up to --documents in all, every one uploaded and run through the real pipeline
   (`attachment_upload`, `attachment_ingest`: extraction, chunking, keyword index, embedding).
   The distractors are technical documentation shipped in packages: the docstrings of the
   Python standard library's modules and of the packages installed in .venv (Django, NumPy,
   pdfminer, …), read with `ast` (nothing is imported or run), one HTML page per module
   (its docstring, then a section per documented class and function), 300 to 800 words.
   They overlap the evaluation topics in places (Python's csv module, text encodings, PDF
   and TeX tooling) as a user's own library would.
   With --data-dir the database is kept there and reused by later runs (nothing is ingested
   twice); without, a temporary one is deleted at the end.
2. Quality: every answerable question of both sets, searched over the whole notebook as the
   search page does (hybrid, no reranker), one-level (SEARCH_TWO_LEVEL_DOCUMENTS=0) and
   two-level at each --keep; hit@5 and nDCG@10 (search.evaluation) and the share of
   questions whose gold file is among the documents the first level kept.
3. Latency: the same searches --repeat times, the variants interleaved question by question
   after a warm-up; p50 and p95 of the whole search, as ratios to one-level.
"""

from __future__ import annotations

import argparse
import ast
import html
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `bench` importable
    sys.path.insert(0, str(REPO))

from bench.ingest import BenchTimeout, deadline, log, setup_django, teardown_django  # noqa: E402

if TYPE_CHECKING:
    from core.types import User

SETS = (REPO.parent / "shared" / "eval", REPO / "eval" / "heldout")
MIN_WORDS, MAX_WORDS = 300, 800
WARMUP = 5
SEED = 7


# --- 1. Corpus -------------------------------------------------------------------------------


def _doc(node: ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    return ast.get_docstring(node, clean=True) or ""


def module_page(path: Path, name: str) -> tuple[str, int] | None:
    """An HTML page of one module's docstrings and its word count, or None if too short."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    sections: list[tuple[str, str]] = [(name, _doc(tree))]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name.startswith("_") or not _doc(node):
                continue
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            sections.append((f"{name}.{node.name} ({kind})", _doc(node)))
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if (
                        isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and not item.name.startswith("_")
                        and _doc(item)
                    ):
                        sections.append((f"{name}.{node.name}.{item.name}", _doc(item)))
    body: list[str] = []
    words = 0
    for title, text in sections:
        if words >= MAX_WORDS:
            break
        paragraphs = [p for p in text.split("\n\n") if p.strip()]
        if not paragraphs:
            continue
        tag = "h1" if not body else "h2"
        body.append(f"<{tag}>{html.escape(title)}</{tag}>")
        for paragraph in paragraphs:
            body.append(f"<p>{html.escape(' '.join(paragraph.split()))}</p>")
            words += len(paragraph.split())
    if words < MIN_WORDS or not sections[0][1]:
        return None
    page = (
        f"<!DOCTYPE html><html><head><title>{html.escape(name)}</title></head>"
        f"<body><article>{''.join(body)}</article></body></html>"
    )
    return page, words


def distractor_pages(wanted: int) -> list[tuple[str, str]]:
    """(file name, HTML) of `wanted` module pages, chosen at random (seeded) among the
    standard library's and .venv's site-packages' modules that document enough."""
    roots = [Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])]
    candidates: list[tuple[Path, str]] = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if any(p.startswith(("test", "_")) or "-" in p or "." in p for p in parts[:-1]):
                continue
            if parts[-1].startswith("test") or "site-packages" in parts[:-1]:
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if name:
                candidates.append((path, name))
    random.Random(SEED).shuffle(candidates)  # noqa: S311 - benchmark data, not secrets
    pages: list[tuple[str, str]] = []
    seen: set[str] = set()
    for path, name in candidates:
        if len(pages) >= wanted:
            break
        if name in seen:
            continue
        made = module_page(path, name)
        if made:
            seen.add(name)
            pages.append((f"{name}.html", made[0]))
    return pages


def build_corpus(documents: int, workers: int) -> dict[str, Any]:
    """The notebook (reused when it is there already): evaluation PDFs, then distractors."""
    from django.contrib.auth import get_user_model
    from django.core.files.uploadedfile import SimpleUploadedFile

    from attachments.models import NoteAttachment
    from attachments.services import attachment_upload
    from attachments.validation import SourceKind
    from notes.models import Note, Notebook
    from notes.services import note_create, notebook_create
    from search.management.commands.evaluate_retrieval import ingest_set, passwords_from_readme

    user, _ = get_user_model().objects.get_or_create(username="bench-two-level")
    notebook = Notebook.objects.filter(owner=user).first() or notebook_create(
        owner=user, title="A thousand documents"
    )
    started = time.perf_counter()
    for root in SETS:
        title = f"Evaluation: {root.name}"
        note = Note.objects.filter(notebook=notebook, title=title).first() or note_create(
            notebook=notebook, author=user, title=title
        )
        pdfs = sorted((root / "pdfs").glob("*.pdf"))
        ingest_set(user, note, pdfs, passwords_from_readme(root / "README.md"), log=log)
    ready = NoteAttachment.objects.filter(note__notebook=notebook, status="ready")
    missing = documents - ready.count()
    pages = distractor_pages(documents)
    have = set(NoteAttachment.objects.filter(note__notebook=notebook).values_list(
        "original_name", flat=True))  # fmt: skip
    pages = [(name, page) for name, page in pages if name not in have]
    per_note = 100
    todo = pages[: max(0, missing)]
    for number, (name, page) in enumerate(todo):
        title = f"Python documentation {number // per_note + 1}"
        note = Note.objects.filter(notebook=notebook, title=title).first() or note_create(
            notebook=notebook, author=user, title=title
        )
        attachment_upload(
            user=user,
            note=note,
            uploaded=SimpleUploadedFile(name, page.encode(), "text/html"),
            kind=SourceKind.FORMAT,
        )
    log(f"distractors: {len(todo)} uploaded; {workers} worker processes ingest them")
    # Worker processes run the pipeline as django-q's would (each claims the next waiting
    # file); they share this process's embedded PostgreSQL.
    data_dir = os.environ["DATA_DIR"]
    procs = [
        subprocess.Popen([sys.executable, __file__, "--worker", "--data-dir", data_dir])  # noqa: S603
        for _ in range(workers)
    ]
    pending = NoteAttachment.objects.filter(
        note__notebook=notebook, status__in=["pending", "processing"]
    )
    while any(p.poll() is None for p in procs):
        time.sleep(10)
        log(f"distractors: {pending.count()} waiting, {time.perf_counter() - started:.0f}s")
    done = len(todo)
    ready = NoteAttachment.objects.filter(note__notebook=notebook, status="ready")
    from attachments.models import ChunkVector, DocumentChunk

    return {
        "user_id": user.pk,
        "notebook_id": notebook.pk,
        "documents": ready.count(),
        "failed": NoteAttachment.objects.filter(note__notebook=notebook, status="failed").count(),
        "chunks": DocumentChunk.objects.filter(attachment__in=ready).count(),
        "windows": ChunkVector.objects.filter(attachment__in=ready).count(),
        "ingested_now": done,
        "seconds": round(time.perf_counter() - started, 1),
    }


def worker() -> None:
    """Run the pipeline on waiting files until none waits (one of build_corpus's workers)."""
    from attachments.models import NoteAttachment
    from attachments.services import attachment_ingest
    from core.embeddings import get_embedder

    get_embedder().embed(["load the model"])
    while True:
        waiting = NoteAttachment.objects.filter(status="pending").values_list("pk", flat=True)
        pk = waiting.first()
        if pk is None:
            return
        try:
            attachment_ingest(attachment_id=pk)
        except Exception as exc:  # the pipeline marked it failed; the corpus goes on
            log(f"attachment {pk}: {type(exc).__name__}: {exc}")


# --- 2 and 3. Quality and latency ------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def run_questions(user: User, notebook_id: int, keeps: list[int], repeat: int) -> dict[str, Any]:
    from django.test import override_settings

    from search.evaluation import load_questions, score_ranking
    from search.retrieval import Scope, search

    questions = []
    for root in SETS:
        questions += [q for q in load_questions(root / "questions.jsonl") if q.answerable]
    scope = Scope(notebook_id=notebook_id, include_notes=False)
    variants = [0, *keeps]
    file_of: dict[int, str] = {}

    def run(keep: int, text: str) -> Any:
        with override_settings(SEARCH_TWO_LEVEL_DOCUMENTS=keep, SEARCH_TWO_LEVEL_MIN_DOCUMENTS=3):
            return search(user=user, query=text, scope=scope, limit=10, rerank=False)

    for q in questions[:WARMUP]:
        for keep in variants:
            run(keep, q.question)
    scores: dict[int, list[dict[str, float]]] = {k: [] for k in variants}
    kept_gold: dict[int, list[float]] = {k: [] for k in keeps}
    seconds: dict[int, list[float]] = {k: [] for k in variants}
    for round_ in range(repeat):
        for n, q in enumerate(questions):
            order = variants if (n + round_) % 2 == 0 else variants[::-1]
            for keep in order:
                started = time.perf_counter()
                found = run(keep, q.question)
                seconds[keep].append(time.perf_counter() - started)
                if round_:
                    continue
                ranking = [
                    (h.chunk.attachment.original_name, h.chunk.page_number)
                    for h in found.hits
                    if h.chunk
                ]
                scores[keep].append(score_ranking(q, ranking))
                if keep:
                    kept = found.info.get("two_level", {}).get("attachment_ids", [])
                    if not file_of:
                        from attachments.models import NoteAttachment

                        file_of.update(
                            NoteAttachment.objects.filter(note__notebook_id=notebook_id)
                            .values_list("pk", "original_name")
                        )  # fmt: skip
                    kept_gold[keep].append(float(q.file in {file_of.get(pk) for pk in kept}))
    out: dict[str, Any] = {"questions": len(questions), "repeat": repeat, "variants": {}}
    base = out["variants"]
    for keep in variants:
        rows = scores[keep]
        figures = {
            "hit@5": round(sum(r["hit@5"] for r in rows) / len(rows), 4),
            "ndcg@10": round(sum(r["ndcg@10"] for r in rows) / len(rows), 4),
            "p50_ms": round(1000 * _percentile(seconds[keep], 0.5), 1),
            "p95_ms": round(1000 * _percentile(seconds[keep], 0.95), 1),
        }
        if keep:
            figures["gold_file_kept"] = round(sum(kept_gold[keep]) / len(kept_gold[keep]), 4)
        base["one-level" if keep == 0 else f"two-level@{keep}"] = figures
    one = base["one-level"]
    for name, figures in base.items():
        if name != "one-level":
            figures["hit@5_ratio"] = (
                round(figures["hit@5"] / one["hit@5"], 3) if one["hit@5"] else None
            )
            figures["p50_ratio"] = round(figures["p50_ms"] / one["p50_ms"], 3)
            figures["p95_ratio"] = round(figures["p95_ms"] / one["p95_ms"], 3)
    return out


def print_report(report: dict[str, Any]) -> None:
    corpus = report.get("corpus", {})
    print(
        f"Two-level search bench: {corpus.get('documents')} ready documents "
        f"({corpus.get('chunks')} passages, {corpus.get('windows')} vectors) in one notebook"
    )
    quality = report.get("quality")
    if not quality:
        return
    print(f"{quality['questions']} answerable questions of both evaluation sets, "
          f"latency over {quality['repeat']} rounds; hybrid, no reranker")  # fmt: skip
    print(f"{'variant':<16}{'hit@5':>8}{'ratio':>8}{'nDCG@10':>9}{'gold kept':>10}"
          f"{'p50 ms':>9}{'ratio':>7}{'p95 ms':>9}{'ratio':>7}")  # fmt: skip
    for name, f in quality["variants"].items():
        print(
            f"{name:<16}{f['hit@5']:>8.3f}{f.get('hit@5_ratio') or 1.0:>8.3f}{f['ndcg@10']:>9.3f}"
            f"{f.get('gold_file_kept', float('nan')):>10.3f}{f['p50_ms']:>9.1f}"
            f"{f.get('p50_ratio', 1.0):>7.2f}{f['p95_ms']:>9.1f}{f.get('p95_ratio', 1.0):>7.2f}"
        )


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise BenchTimeout("terminated by SIGTERM")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--documents", type=int, default=1000, help="documents in the notebook")
    parser.add_argument("--keep", default="10,20,50", help="two-level SEARCH_TWO_LEVEL_DOCUMENTS")
    parser.add_argument("--repeat", type=int, default=3, help="latency rounds")
    parser.add_argument("--data-dir", type=Path, help="keep the database here and reuse it")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--max-seconds", type=int, default=5400, help="stop after this long")
    parser.add_argument("--workers", type=int, default=2, help="ingestion processes")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:  # a child of build_corpus: DATA_DIR is the parent's
        setup_django(args.data_dir)
        try:
            worker()
        finally:
            teardown_django(args.data_dir, keep=True)
        return 0
    keeps = [int(k) for k in args.keep.split(",") if k.strip()]
    temporary = args.data_dir is None
    work = Path(tempfile.mkdtemp(prefix="bench-two-level-")) if temporary else args.data_dir
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)  # as root the embedded server runs as another user and must get in
    data_dir = work / "data"
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    code = 0
    signal.signal(signal.SIGTERM, _terminated)
    ready = False
    try:
        with deadline(args.max_seconds):
            os.environ["DEBUG"] = "0"  # connection.queries would grow with every query
            setup_django(data_dir)
            ready = True
            from django.contrib.auth import get_user_model

            from core.embeddings import get_embedder

            get_embedder().embed(["load the model before anything is timed"])
            report["corpus"] = build_corpus(args.documents, args.workers)
            log(f"corpus: {report['corpus']}")
            user = get_user_model().objects.get(pk=report["corpus"]["user_id"])
            report["quality"] = run_questions(
                user, report["corpus"]["notebook_id"], keeps, args.repeat
            )
    except BenchTimeout as exc:
        log(str(exc))
        report["error"] = str(exc)
        code = 2
    except Exception as exc:
        traceback.print_exc()
        report["error"] = f"{type(exc).__name__}: {exc}"
        code = 1
    finally:
        if ready:
            teardown_django(data_dir, keep=not temporary)
        if temporary:
            shutil.rmtree(work, ignore_errors=True)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
