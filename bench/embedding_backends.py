"""Embedding runtimes of the bundled model compared on the same real chunks, in one run:
sentence-transformers fp32 (EMBEDDING_RUNTIME=torch) vs ONNX Runtime fp32 and int8.

    .venv/bin/python bench/embedding_backends.py [--pdfs DIR] [--files a.pdf,b.pdf]
                                                 [--chunks N] [--repeat N]

Also run by bench/ingest.py (unless --no-embedders). The chunks are those the pipeline makes of
the PDFs (extract_text, chunk_pages; files that need a password, OCR or repair are left out),
an even sample of --chunks of them, embedded window by window in the pipeline's batches. Each
runtime embeds them --repeat times, the runtimes taking turns (a load spike hits all of them);
the best round counts. Prints chunks/s, the ratio to sentence-transformers, and the cosine of
each window's vector to sentence-transformers' (min and mean). Standalone, it uses DATA_DIR's
ONNX cache (made at first use: that time is printed as "load").
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PDFS = REPO.parent / "shared" / "eval" / "pdfs"
RUNTIMES = ("torch", "onnx", "onnx-int8")  # the first is the baseline
TARGET_RATIO = 2.0


def _log(message: str) -> None:
    print(f"[embedders] {message}", file=sys.stderr, flush=True)


def sample_chunks(files: list[Path], count: int) -> list[tuple[str, list[str]]]:
    """(content, heading path) of an even sample of `count` chunks of `files`."""
    from attachments.chunking import chunk_pages
    from attachments.pdf.extract import extract_text

    chunks = []
    for path in files:
        try:
            pages = extract_text(path, processes=1).pages
        except Exception as exc:  # password, damage: not this bench's subject
            _log(f"skip {path.name}: {exc}")
            continue
        chunks += [(c.content, c.heading_path) for c in chunk_pages(pages) if c.content.strip()]
    if len(chunks) > count > 0:
        step = len(chunks) / count
        chunks = [chunks[int(i * step)] for i in range(count)]
    return chunks


def run(files: list[Path], *, chunks: int = 120, repeat: int = 2) -> dict[str, Any]:
    import numpy as np
    from django.conf import settings

    from core.embeddings import DEFAULT_LOCAL_MODEL, _construct

    sample = sample_chunks(files, chunks)
    embedders: dict[str, Any] = {}
    result: dict[str, Any] = {"chunks": len(sample), "repeat": repeat, "runtimes": {}}
    for runtime in RUNTIMES:
        started = time.perf_counter()
        embedders[runtime] = _construct("local", "", settings.EMBEDDING_DIMENSIONS, "", "", runtime)
        embedders[runtime].embed(["warm up"])
        load = time.perf_counter() - started
        result["runtimes"][runtime] = {"load_s": round(load, 2), "seconds": []}
        _log(f"{runtime}: loaded in {load:.1f} s")
    # The same windows for all (checked: the tokenizer is the same).
    windows = [embedders["torch"].windows(text, prefix=" › ".join(path)) for text, path in sample]
    for runtime in RUNTIMES[1:]:
        other = [embedders[runtime].windows(t, prefix=" › ".join(p)) for t, p in sample]
        result["runtimes"][runtime]["same_windows"] = other == windows
    texts = [w for ws in windows for w in ws]
    result["windows"] = len(texts)
    batch = settings.EMBEDDING_BATCH_SIZE * 4  # as attachments.services.ingestion._embed
    vectors: dict[str, Any] = {}
    for round_ in range(repeat):
        for runtime in RUNTIMES:
            embedder = embedders[runtime]
            out: list[list[float]] = []
            started = time.perf_counter()
            for i in range(0, len(texts), batch):
                out += embedder.embed(texts[i : i + batch])
            took = time.perf_counter() - started
            result["runtimes"][runtime]["seconds"].append(round(took, 3))
            vectors[runtime] = np.array(out, dtype=np.float32)
            _log(f"round {round_ + 1}: {runtime} {len(sample) / took:.1f} chunks/s")
    base = min(result["runtimes"]["torch"]["seconds"])
    for runtime, row in result["runtimes"].items():
        best = min(row["seconds"])
        row["chunks_per_s"] = round(len(sample) / best, 2) if best else None
        row["ratio"] = round(base / best, 2) if best else None
        cos = (vectors[runtime] * vectors["torch"]).sum(axis=1)
        row["cosine_min"], row["cosine_mean"] = (
            round(float(cos.min()), 4),
            round(float(cos.mean()), 4),
        )
    result["model"] = DEFAULT_LOCAL_MODEL
    result["threads"] = len(os.sched_getaffinity(0))
    return result


def print_result(result: dict[str, Any]) -> None:
    print(
        f"Embedding runtimes ({result['model']}): {result['chunks']} chunks "
        f"({result['windows']} windows), best of {result['repeat']} rounds, "
        f"{result['threads']} cores, target ≥ {TARGET_RATIO}× sentence-transformers"
    )
    print(f"{'runtime':<26}{'load s':>8}{'chunks/s':>10}{'ratio':>7}{'cos min':>9}{'cos mean':>9}")
    names = {
        "torch": "sentence-transformers fp32",
        "onnx": "onnxruntime fp32",
        "onnx-int8": "onnxruntime int8",
    }
    for runtime, row in result["runtimes"].items():
        print(
            f"{names[runtime]:<26}{row['load_s']:>8.1f}{row['chunks_per_s']:>10.2f}"
            f"{row['ratio']:>6.2f}×{row['cosine_min']:>9.4f}{row['cosine_mean']:>9.4f}"
            + ("" if row.get("same_windows", True) else "  (other windows!)")
        )
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pdfs", type=Path, default=DEFAULT_PDFS)
    parser.add_argument("--files", default="", help="comma-separated file names to restrict to")
    parser.add_argument("--chunks", type=int, default=120, help="chunks in the sample")
    parser.add_argument("--repeat", type=int, default=2, help="rounds (best of N)")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "notebook.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    names = [n.strip() for n in args.files.split(",") if n.strip()]
    files = [args.pdfs / n for n in names] if names else sorted(args.pdfs.glob("*.pdf"))
    print_result(run(files, chunks=args.chunks, repeat=args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
