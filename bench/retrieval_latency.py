"""Retrieval benchmark at scale: latency per mode and stage, HNSW recall, scoped recall.

    .venv/bin/python bench/retrieval_latency.py [--chunks N] [--queries N] [--pdfs DIR]
        [--questions FILE] [--vectors mix|noise] [--noise SIGMA] [--seed N]
        [--json OUT.json] [--max-seconds S] [--keep-data]

Runs against a fresh embedded PostgreSQL in a temporary DATA_DIR (never the dev database),
which is deleted at the end unless --keep-data. Results go to stdout, progress to stderr.

1. Corpus: the eval PDFs go once through the real pipeline (upload + attachment_ingest) into
   the bench user's seed note; their chunks and window vectors are then copied in bulk into
   synthetic ready attachments (words rotated, ~5 % dropped, a per-copy token added; vectors
   mixed with another seed window, see replicate()) spread over notes and notebooks of four
   users, up to --chunks chunks. tsvector and token_len are computed in SQL as the pipeline
   does; the GIN and HNSW indexes are rebuilt after the bulk load, then VACUUM ANALYZE.
2. HNSW recall@10: `vector()` as shipped against an exact scan (no index) of the same scope,
   over everything the bench user sees, and at other hnsw.ef_search values for information.
3. Scoped recall@10: the same within one note holding ~1 % of the corpus, as the planner
   chooses and with the HNSW index forced (pgvector's iterative scans must then keep going
   until 10 rows pass the filter), and, for information, one note holding one attachment.
4. Latency: --queries questions (the eval set cycled with light variation) as the bench user
   over everything they may see, in each mode, after a warm-up; p50/p95 of the total and of
   each stage (`SearchResult.timings`), and hybrid p95 / vector p95 (target <= 2.0).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `bench` importable
    sys.path.insert(0, str(REPO))

from bench.ingest import (  # noqa: E402
    BenchTimeout,
    deadline,
    log,
    select_files,
    setup_django,
    teardown_django,
)

if TYPE_CHECKING:
    from core.types import User
    from search.retrieval import Mode

DEFAULT_PDFS = REPO.parent / "shared" / "eval" / "pdfs"
DEFAULT_QUESTIONS = REPO.parent / "shared" / "eval" / "questions.jsonl"
MODES: tuple[Mode, ...] = ("lexical", "vector", "hybrid")
TARGET_HYBRID_RATIO = 2.0
TARGET_RECALL = 0.95
K = 10
STAGE_ORDER = ("lexical", "embed_query", "vector", "fuse")
OTHER_USERS = 3
NOTES_PER_NOTEBOOK = 8
WARMUP_QUERIES = 5
LATENCY_MARGIN_S = 30  # left for the teardown when the latency loop runs out of time
EF_SWEEP = (40, 100, 200, 400)  # hnsw.ef_search values tried besides the shipped one
DROP_WORD_P = 0.05  # share of a copied chunk's words left out, so term frequencies vary
HNSW_INDEX = "chunkvector_embedding_hnsw"
GIN_INDEX = "chunk_search_vector_gin"
# Build-time settings for the index builds after the bulk load (this session only).
BUILD_SETTINGS = ("SET maintenance_work_mem = '1GB'", "SET max_parallel_maintenance_workers = 1")


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


# --- 1. Corpus -------------------------------------------------------------------------------


def ingest_seed(files: list[Path]) -> dict[str, Any]:
    """The eval PDFs through the real pipeline into the bench user's seed note; files that are
    refused, need a password or fail are skipped."""
    from django.contrib.auth import get_user_model
    from django.core.exceptions import ValidationError
    from django.core.files.uploadedfile import SimpleUploadedFile

    from attachments.models import DocumentChunk, NoteAttachment
    from attachments.services import attachment_ingest, attachment_upload
    from notes.services import note_create, notebook_create

    user = get_user_model().objects.create_user(username="bench", password=None)
    notebook = notebook_create(owner=user, title="Seed PDFs")
    note = note_create(notebook=notebook, author=user, title="Seed PDFs")
    started = time.perf_counter()
    files_out: dict[str, str] = {}
    for path in files:
        try:
            attachment = attachment_upload(
                user=user,
                note=note,
                uploaded=SimpleUploadedFile(path.name, path.read_bytes(), "application/pdf"),
            )
        except ValidationError as exc:
            files_out[path.name] = "refused: " + " ".join(exc.messages)
            log(f"seed {path.name}: {files_out[path.name]}")
            continue
        if attachment.status == NoteAttachment.Status.NEEDS_PASSWORD:
            files_out[path.name] = "skipped: needs a password"
            log(f"seed {path.name}: {files_out[path.name]}")
            continue
        file_started = time.perf_counter()
        try:
            attachment_ingest(attachment_id=attachment.pk)
        except BenchTimeout:
            raise
        except Exception as exc:  # the pipeline logged it and marked the row failed
            log(f"seed {path.name}: {type(exc).__name__}: {exc}")
        attachment.refresh_from_db()
        files_out[path.name] = attachment.status
        log(
            f"seed {path.name}: {attachment.status} in {time.perf_counter() - file_started:.1f}s"
            + (f" ({attachment.error})" if attachment.error else "")
        )
    ready = NoteAttachment.objects.filter(note=note, status=NoteAttachment.Status.READY)
    chunks = DocumentChunk.objects.filter(attachment__in=ready).count()
    if not chunks:
        raise SystemExit("no seed PDF became ready; nothing to replicate")
    return {
        "user_id": user.pk,
        "note_id": note.pk,
        "seconds": round(time.perf_counter() - started, 1),
        "files": files_out,
        "ready_files": ready.count(),
        "chunks": chunks,
    }


def _vary_words(words: list[str], token: str, rng: random.Random) -> str:
    """The words rotated at a random point, about DROP_WORD_P of them left out, and `token`
    inserted somewhere: same vocabulary, different positions and term frequencies."""
    if not words:
        return token
    k = rng.randrange(len(words))
    kept = [w for w in words[k:] + words[:k] if rng.random() >= DROP_WORD_P] or words[:1]
    kept.insert(rng.randrange(len(kept) + 1), token)
    return " ".join(kept)


def _parallel(tasks: list[Callable[[], None]], workers: int = 2) -> None:
    """Run `tasks` on `workers` threads, each with its own database connection."""
    from django.db import connections

    queue = list(reversed(tasks))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            while True:
                with lock:
                    if not queue or errors:
                        return
                    task = queue.pop()
                task()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _columns(model: Any) -> list[str]:
    return [f.column for f in model._meta.concrete_fields if f.column]


def _index_defs(cursor: Any, names: tuple[str, ...]) -> dict[str, str]:
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE indexname = ANY(%s)", [list(names)]
    )
    return dict(cursor.fetchall())


def replicate(
    *,
    seed: dict[str, Any],
    target_chunks: int,
    vectors: str,
    noise: float,
    seed_rng: int,
    first_copy: int = 0,
) -> dict[str, Any]:
    """Copy the seed chunks and vectors into synthetic attachments until the database holds
    about `target_chunks`. A second call grows the corpus: copies are numbered on from
    `first_copy` (their tokens and random draws differ from the first call's)."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from pgvector.psycopg import register_vector

    from attachments.models import ChunkVector, DocumentChunk, NoteAttachment
    from attachments.services.ingestion import index_statistics
    from core.language import SEGMENTED, segment_for_search, tsvector_sql, word_count_sql
    from notes.models import Note, Notebook

    rng = random.Random(seed_rng + first_copy)  # noqa: S311 - benchmark data, not secrets
    nprng = np.random.default_rng(seed_rng + first_copy)
    timings: dict[str, float] = {}
    User = get_user_model()
    bench = User.objects.get(pk=seed["user_id"])
    others = []
    for i in range(1, OTHER_USERS + 1):
        other = User.objects.filter(username=f"bench-other-{i}").first()
        others.append(other or User.objects.create_user(username=f"bench-other-{i}", password=None))

    seed_atts = list(
        NoteAttachment.objects.filter(
            note_id=seed["note_id"], status=NoteAttachment.Status.READY
        ).order_by("pk")
    )
    seed_chunks = list(
        DocumentChunk.objects.filter(attachment__in=seed_atts)
        .order_by("attachment_id", "index")
        .values_list("pk", "attachment_id", "content")
    )
    n_seed = len(seed_chunks)
    copies = max(0, math.ceil((target_chunks - DocumentChunk.objects.count()) / n_seed))
    language = {a.pk: a.language for a in seed_atts}
    config = {a.pk: a.search_config for a in seed_atts}
    # Chinese is indexed as jieba words: vary the segmented words for the tsvector (cut once
    # per seed chunk), the raw text for the content.
    words = [content.split() for _, _, content in seed_chunks]
    index_words = [
        segment_for_search(content, language[att]).split() if language[att] in SEGMENTED else None
        for _, att, content in seed_chunks
    ]

    # Layout: copy c is one note (every 5th copy: one note per attachment); a quarter of the
    # copies belong to other users; notes are grouped NOTES_PER_NOTEBOOK to a notebook.
    started = time.perf_counter()
    numbers = range(first_copy, first_copy + copies)
    owners = [others[c % OTHER_USERS] if c % 4 == 2 else bench for c in numbers]
    split = [c % 5 == 1 for c in numbers]
    notebooks: dict[int, list[Notebook]] = {}
    note_count: dict[int, int] = {}
    note_specs: list[tuple[Notebook, str]] = []
    for c in range(copies):
        owner = owners[c]
        for i in range(len(seed_atts) if split[c] else 1):
            n = note_count.get(owner.pk, 0)
            if n % NOTES_PER_NOTEBOOK == 0:
                nb = Notebook(
                    owner=owner, title=f"Bench notebook {len(notebooks.get(owner.pk, []))}"
                )
                notebooks.setdefault(owner.pk, []).append(nb)
            note_count[owner.pk] = n + 1
            note_specs.append(
                (
                    notebooks[owner.pk][-1],
                    f"Copy {first_copy + c}" + (f".{i}" if split[c] else ""),
                )
            )
    Notebook.objects.bulk_create([nb for nbs in notebooks.values() for nb in nbs])
    # Empty bodies and no tsvector/vectors: the notes themselves match nothing, so every hit
    # is a document chunk.
    notes = Note.objects.bulk_create(
        [Note(notebook=nb, author=nb.owner, title=title) for nb, title in note_specs],
        batch_size=1000,
    )
    note_of: list[list[int]] = []
    it = iter(notes)
    for c in range(copies):
        if split[c]:
            note_of.append([next(it).pk for _ in seed_atts])
        else:
            pk = next(it).pk
            note_of.append([pk] * len(seed_atts))

    att_table = NoteAttachment._meta.db_table
    chunk_table = DocumentChunk._meta.db_table
    vector_table = ChunkVector._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {att_table}")  # noqa: S608
        att_base = int(cursor.fetchone()[0])
        cursor.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {chunk_table}")  # noqa: S608
        chunk_base = int(cursor.fetchone()[0])

    def att_id(c: int, a: int) -> int:
        return att_base + c * len(seed_atts) + a

    def chunk_id(c: int, j: int) -> int:
        return chunk_base + c * n_seed + j

    # Attachments: every column copied from the seed, except identity, note and timestamps.
    att_cols = _columns(NoteAttachment)
    att_over = {
        "id": "m.new_id",
        "uuid": "gen_random_uuid()",
        "note_id": "m.note_id",
        "sha256": "encode(sha256(m.new_id::text::bytea), 'hex')",
        "status": "'ready'",
        "created_at": "now()",
        "updated_at": "now()",
        "ready_at": "now()",
    }
    new_ids, seed_ids, note_ids = [], [], []
    att_index = {a.pk: i for i, a in enumerate(seed_atts)}
    for c in range(copies):
        for i, a in enumerate(seed_atts):
            new_ids.append(att_id(c, i))
            seed_ids.append(a.pk)
            note_ids.append(note_of[c][i])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {att_table} ({', '.join(att_cols)}) "  # noqa: S608 - our columns
            f"SELECT {', '.join(att_over.get(col, 'a.' + col) for col in att_cols)} "
            "FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS m(new_id, seed_id, note_id) "
            f"JOIN {att_table} a ON a.id = m.seed_id",
            [new_ids, seed_ids, note_ids],
        )
        cursor.execute(
            f"SELECT setval(pg_get_serial_sequence('{att_table}', 'id'), max(id)) FROM {att_table}"  # noqa: S608
        )
    timings["layout"] = time.perf_counter() - started

    # Drop the GIN and HNSW indexes; rebuilding them once is faster than maintaining them.
    with connection.cursor() as cursor:
        index_defs = _index_defs(cursor, (GIN_INDEX, HNSW_INDEX))
        for name in index_defs:
            cursor.execute(f'DROP INDEX "{name}"')

    # Chunks: the varied texts go to an unlogged staging table by COPY, then two connections
    # insert them with their tsvector (the CPU-heavy part) from the seed rows' other columns.
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE UNLOGGED TABLE bench_stage (id bigint PRIMARY KEY, seed_id bigint, "
            "attachment_id bigint, content text, index_text text)"
        )
        with cursor.copy(
            "COPY bench_stage (id, seed_id, attachment_id, content, index_text) FROM STDIN"
        ) as copy:
            for c in range(copies):
                token = f"bench{first_copy + c:04d}{rng.getrandbits(20):05x}"
                for j, (seed_pk, att, _) in enumerate(seed_chunks):
                    content = _vary_words(words[j], token, rng)
                    seg = index_words[j]
                    index_text = _vary_words(seg, token, rng) if seg is not None else None
                    copy.write_row(
                        (chunk_id(c, j), seed_pk, att_id(c, att_index[att]), content, index_text)
                    )
    timings["chunk_text"] = time.perf_counter() - started
    log(f"replicate: {copies} copies of {n_seed} chunks staged in {timings['chunk_text']:.1f}s")

    started = time.perf_counter()
    chunk_cols = _columns(DocumentChunk)
    chunk_over = {
        "id": "s.id",
        "attachment_id": "s.attachment_id",
        "content": "s.content",
        "char_count": "length(s.content)",
        "search_vector": "s.search_vector",
        "token_len": word_count_sql("s.search_vector"),
    }
    select = ", ".join(chunk_over.get(col, "c." + col) for col in chunk_cols)

    def insert(cfg: str, part: int, parts: int) -> Callable[[], None]:
        def run() -> None:
            from django.db import connection as conn

            tsv = tsvector_sql(cfg, "coalesce(s.index_text, s.content)")
            with conn.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {chunk_table} ({', '.join(chunk_cols)}) "  # noqa: S608
                    f"SELECT {select} FROM ("
                    f"  SELECT s.*, {tsv} AS search_vector FROM bench_stage s"
                    f"  JOIN {att_table} a ON a.id = s.attachment_id"
                    "   WHERE a.search_config = %s AND s.id %% %s = %s"
                    f") s JOIN {chunk_table} c ON c.id = s.seed_id",
                    [cfg, cfg, parts, part],
                )

        return run

    _parallel([insert(cfg, p, 2) for cfg in sorted(set(config.values())) for p in range(2)])
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE bench_stage")
        cursor.execute(
            f"SELECT setval(pg_get_serial_sequence('{chunk_table}', 'id'), max(id)) "  # noqa: S608
            f"FROM {chunk_table}"
        )
    timings["chunk_insert"] = time.perf_counter() - started
    log(f"replicate: chunks inserted with their tsvector in {timings['chunk_insert']:.1f}s")

    # Vectors, per copy of each seed window v (renormalised):
    #   mix:   a·(v + N(0, noise²)) + (1-a)·u, a ~ U(0, 1), u a seed window at random. Stays
    #          among real embeddings (their span and mean direction) without piling copies up.
    #   noise: v + N(0, noise²). 100+ near-copies of every window form tight clusters, which
    #          HNSW graphs link poorly (recall@10 ~0.4 at 100k chunks): a worst case.
    started = time.perf_counter()
    seed_pos = {pk: j for j, (pk, _, _) in enumerate(seed_chunks)}
    seed_vecs = list(
        ChunkVector.objects.filter(chunk_id__in=seed_pos)
        .order_by("chunk_id", "window")
        .values_list("chunk_id", "attachment_id", "window", "embedding")
    )
    base = np.array([np.asarray(v[3], dtype=np.float32) for v in seed_vecs])
    j_of = np.array([seed_pos[v[0]] for v in seed_vecs])
    a_of = np.array([att_index[v[1]] for v in seed_vecs])
    w_of = [int(v[2]) for v in seed_vecs]
    cosines: list[float] = []
    register_vector(connection.connection)
    with (
        connection.cursor() as cursor,
        cursor.copy(
            f'COPY {vector_table} (chunk_id, attachment_id, "window", embedding) '
            "FROM STDIN WITH (FORMAT BINARY)"
        ) as copy,
    ):
        copy.set_types(["int8", "int8", "int2", "vector"])
        for c in range(copies):
            vecs = base + nprng.normal(0.0, noise, base.shape).astype(np.float32)
            if vectors == "mix":
                own = nprng.uniform(0.0, 1.0, (len(base), 1)).astype(np.float32)
                partner = base[nprng.integers(0, len(base), len(base))]
                vecs = own * vecs + (1 - own) * partner
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            cosines.append(float(np.mean(np.sum(vecs * base, axis=1))))
            for k in range(len(vecs)):
                copy.write_row(
                    (
                        chunk_id(c, int(j_of[k])),
                        att_id(c, int(a_of[k])),
                        w_of[k],
                        vecs[k],
                    )
                )
    timings["vectors"] = time.perf_counter() - started
    log(f"replicate: {len(base) * copies} vectors copied in {timings['vectors']:.1f}s")

    # BM25 statistics per file, as ingestion writes them (chunk count, length, lexeme counts).
    started = time.perf_counter()
    index_statistics(attachment_ids=list(NoteAttachment.objects.values_list("pk", flat=True)))
    timings["statistics"] = time.perf_counter() - started
    log(f"replicate: BM25 statistics counted in {timings['statistics']:.1f}s")

    started = time.perf_counter()
    with connection.cursor() as cursor:
        for statement in BUILD_SETTINGS:
            cursor.execute(statement)
        for name in (GIN_INDEX, HNSW_INDEX):
            if name in index_defs:
                t = time.perf_counter()
                cursor.execute(index_defs[name])
                timings[f"index_{name}"] = time.perf_counter() - t
                log(f"replicate: {name} built in {timings[f'index_{name}']:.1f}s")
        cursor.execute("RESET maintenance_work_mem")
        cursor.execute("RESET max_parallel_maintenance_workers")
    timings["indexes"] = time.perf_counter() - started
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    timings["vacuum_analyze"] = time.perf_counter() - started
    log(f"replicate: VACUUM ANALYZE in {timings['vacuum_analyze']:.1f}s")

    return {
        "copies": copies,
        "vectors": vectors,
        "noise_sigma": noise,
        "mean_cosine_to_seed": round(float(np.mean(cosines)), 3) if cosines else None,
        "seconds": {k: round(v, 1) for k, v in timings.items()},
        "index_defs": index_defs,
        "other_user_ids": [u.pk for u in others],
        "split_copies": sum(split),
    }


def corpus_stats(user: User) -> dict[str, Any]:
    """What the database holds, and how much of it `user` sees."""
    from django.db import connection

    from attachments.models import ChunkVector, DocumentChunk, NoteAttachment
    from notes.models import Note, Notebook
    from notes.selectors import visible_notes

    visible = NoteAttachment.objects.filter(note__in=visible_notes(user=user))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_size_pretty(pg_relation_size(%s)), pg_size_pretty(pg_total_relation_size("
            "%s)), pg_size_pretty(pg_total_relation_size(%s))",
            [HNSW_INDEX, ChunkVector._meta.db_table, DocumentChunk._meta.db_table],
        )
        hnsw_size, vectors_size, chunks_size = cursor.fetchone()
    chunks = DocumentChunk.objects.count()
    return {
        "chunks": chunks,
        "vectors": ChunkVector.objects.count(),
        "attachments": NoteAttachment.objects.count(),
        "notes": Note.objects.count(),
        "notebooks": Notebook.objects.count(),
        "users": Notebook.objects.values("owner").distinct().count(),
        "user_chunks": DocumentChunk.objects.filter(attachment__in=visible).count(),
        "hnsw_size": hnsw_size,
        "chunkvector_total_size": vectors_size,
        "documentchunk_total_size": chunks_size,
    }


# --- 4. Queries and latency ------------------------------------------------------------------


PREFIXES = ("Quick question: ", "In the manual, ", "Can you tell me: ", "I wonder: ")


def make_queries(path: Path, n: int, rng: random.Random) -> list[str]:
    """The eval questions cycled: as written on the first pass, then in turn lower-cased,
    with one word left out, or with a prefix (a fifth pass repeats the second)."""
    questions = [
        json.loads(line)["question"] for line in path.read_text().splitlines() if line.strip()
    ]
    out: list[str] = []
    for i in range(n):
        q = questions[i % len(questions)]
        cycle = i // len(questions)
        words = q.split()
        if cycle == 0:
            pass
        elif cycle % 3 == 1:
            q = q.lower().rstrip("?？ ")
        elif cycle % 3 == 2 and len(words) > 4:
            del words[rng.randrange(1, len(words))]
            q = " ".join(words)
        else:
            q = rng.choice(PREFIXES) + q
        out.append(q)
    return out


def warm_up(user: User, queries: list[str]) -> float:
    from core.embeddings import get_embedder
    from search.retrieval import search

    started = time.perf_counter()
    get_embedder().embed(["warm-up: load the model before anything is timed"])
    for q in queries[:WARMUP_QUERIES]:
        for mode in MODES:
            search(user=user, query=q, scope=search_scope(), limit=K, mode=mode, rerank=False)
    return time.perf_counter() - started


def search_scope() -> Any:
    """What the search page searches by default: all the user's documents and notes (the
    notes here have no text, so their legs run but find nothing)."""
    from search.retrieval import Scope

    return Scope()


def chunk_scope(**kwargs: Any) -> Any:
    """Document chunks only, for the recall runs: one HNSW query per call."""
    from search.retrieval import Scope

    return Scope(include_notes=False, **kwargs)


def run_latency(user: User, queries: list[str], raw: dict[str, Any], stop_at: float) -> None:
    """Every query in every mode, seconds into `raw` as they come (so a run cut short by
    --max-seconds still reports what it measured); stops early at `stop_at`."""
    from search.retrieval import search

    totals: dict[str, list[float]] = raw.setdefault("totals", {m: [] for m in MODES})
    stages: dict[str, dict[str, list[float]]] = raw.setdefault("stages", {m: {} for m in MODES})
    empty: dict[str, int] = raw.setdefault("empty", dict.fromkeys(MODES, 0))
    raw["loadavg_before"] = [round(x, 2) for x in os.getloadavg()]
    raw["planned"] = len(queries)
    for i, q in enumerate(queries):
        if time.perf_counter() > stop_at:
            log(f"latency: out of time after {i} queries")
            break
        # Rotate the order so that no mode always runs right after another's cache misses.
        order = MODES[i % 3 :] + MODES[: i % 3]
        for mode in order:
            started = time.perf_counter()
            result = search(
                user=user, query=q, scope=search_scope(), limit=K, mode=mode, rerank=False
            )
            totals[mode].append(time.perf_counter() - started)
            for stage, seconds in result.timings.items():
                stages[mode].setdefault(stage, []).append(seconds)
            empty[mode] += not result.hits
        raw["done"] = i + 1
        # Another busy process on the machine shows here (ours use one core at a time).
        raw.setdefault("loadavg_1min", []).append(round(os.getloadavg()[0], 2))
        if (i + 1) % 20 == 0:
            log(
                f"latency {i + 1}/{len(queries)}: "
                + ", ".join(f"{m} p50 {_ms(_pct(totals[m], 50))} ms" for m in MODES)
            )
    raw["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]


def summarize_latency(raw: dict[str, Any]) -> dict[str, Any]:
    modes: dict[str, Any] = {}
    for mode in MODES:
        totals = raw["totals"][mode]
        modes[mode] = {
            "total": {"p50": _pct(totals, 50), "p95": _pct(totals, 95)},
            "stages": {
                stage: {"p50": _pct(v, 50), "p95": _pct(v, 95)}
                for stage, v in raw["stages"][mode].items()
            },
            "empty_results": raw["empty"][mode],
        }
    ratio = modes["hybrid"]["total"]["p95"] / modes["vector"]["total"]["p95"]
    return {
        "queries": raw.get("done", 0),
        "planned": raw.get("planned", 0),
        "modes": modes,
        "hybrid_vector_p95_ratio": ratio,
        "target": TARGET_HYBRID_RATIO,
        "meets_target": ratio <= TARGET_HYBRID_RATIO,
        "loadavg_before": raw.get("loadavg_before"),
        "loadavg_1min_max": max(raw.get("loadavg_1min", [0.0])),
        "loadavg_after": raw.get("loadavg_after", [round(x, 2) for x in os.getloadavg()]),
    }


# --- 2./3. Recall ----------------------------------------------------------------------------


_EXACT_SQL = """
WITH scope AS MATERIALIZED ({scope})
SELECT v.chunk_id, max(1 - (v.embedding <=> %s::vector)) AS similarity
FROM {vectors} v
WHERE v.attachment_id IN (SELECT id FROM scope)
GROUP BY v.chunk_id
ORDER BY similarity DESC, v.chunk_id
LIMIT %s
"""


def _literal(embedding: list[float]) -> str:
    return "[" + ",".join(f"{v:.7g}" for v in embedding) + "]"


def _exact_sql(user: User, scope: Any, embedding: list[float]) -> tuple[str, list[Any]]:
    from attachments.models import ChunkVector
    from search.retrieval import scoped_attachments

    scope_sql, scope_params = scoped_attachments(user=user, scope=scope)
    sql = _EXACT_SQL.format(scope=scope_sql, vectors=ChunkVector._meta.db_table)
    return sql, [*scope_params, _literal(embedding), K]


def exact_top(user: User, embedding: list[float], scope: Any) -> list[int]:
    """The true top K chunks (best window each) by a sequential scan, no index."""
    from django.db import connection, transaction

    sql, params = _exact_sql(user, scope, embedding)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute(sql, params)
        return [int(pk) for pk, _ in cursor.fetchall()]


@contextmanager
def captured_sql() -> Iterator[list[tuple[str, Any]]]:
    """Every (sql, params) the default connection executes inside the block."""
    from django.db import connection

    seen: list[tuple[str, Any]] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield seen


def explain_plans(
    user: User,
    embedding: list[float],
    scope: Any,
    *,
    ef_search: int | None = None,
    force_hnsw: bool = False,
) -> dict[str, Any]:
    """EXPLAIN of the chunk query `vector()` runs (replaying its SET LOCALs) and of the exact
    scan; the first must use the HNSW index, the second must not."""
    from django.db import connection, transaction

    from attachments.models import ChunkVector
    from search.retrieval import vector

    # The first wrapper is the outermost: the planner's changes reach captured_sql.
    with planner(ef_search=ef_search, force_hnsw=force_hnsw), captured_sql() as seen:
        vector(user=user, embedding=embedding, scope=scope, limit=K)
    sets = [sql for sql, _ in seen if sql.lstrip().upper().startswith("SET")]
    sql, params = next((s, p) for s, p in seen if ChunkVector._meta.db_table in s)
    plans: dict[str, Any] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        for statement in sets:
            cursor.execute(statement)
        cursor.execute("EXPLAIN " + sql, params)
        plans["vector"] = "\n".join(r[0] for r in cursor.fetchall())
    sql, exact_params = _exact_sql(user, scope, embedding)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("EXPLAIN " + sql, exact_params)
        plans["exact"] = "\n".join(r[0] for r in cursor.fetchall())
    plans["vector_uses_hnsw"] = HNSW_INDEX in plans["vector"]
    plans["exact_uses_hnsw"] = HNSW_INDEX in plans["exact"]
    return plans


@contextmanager
def planner(*, ef_search: int | None = None, force_hnsw: bool = False) -> Iterator[None]:
    """Run `vector()` as shipped but with another `hnsw.ef_search`, or with sorting disabled
    so that the planner takes the HNSW index even where sorting the few rows of a small scope
    would be cheaper (that is what exercises pgvector's iterative scans)."""
    from django.db import connection

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if ef_search is not None and sql.startswith("SET LOCAL hnsw.ef_search"):
            sql = f"SET LOCAL hnsw.ef_search = {int(ef_search)}"
        result = execute(sql, params, many, context)
        if force_hnsw and sql.startswith("SET LOCAL hnsw.iterative_scan"):
            execute("SET LOCAL enable_sort = off", None, False, context)
        return result

    with connection.execute_wrapper(wrapper):
        yield


def run_recall(
    user: User,
    embeddings: list[list[float]],
    scopes: list[Any],
    truths: dict[tuple[Any, ...], list[int]],
    label: str,
    *,
    ef_search: int | None = None,
    force_hnsw: bool = False,
) -> dict[str, Any]:
    """Mean recall@K of `vector()` against the exact top K (cached in `truths` by query and
    scope, since several rows share them)."""
    from search.retrieval import vector

    recalls: list[float] = []
    short = 0
    hnsw_s: list[float] = []
    exact_s: list[float] = []
    for i, (embedding, scope) in enumerate(zip(embeddings, scopes, strict=True)):
        started = time.perf_counter()
        with planner(ef_search=ef_search, force_hnsw=force_hnsw):
            found = vector(user=user, embedding=embedding, scope=scope, limit=K)
        hnsw_s.append(time.perf_counter() - started)
        got = [pk for (kind, pk), _ in found if kind == "document"]
        key = (i, scope.notebook_id, scope.note_id, str(scope.attachment_ids))
        if key not in truths:
            started = time.perf_counter()
            truths[key] = exact_top(user, embedding, scope)
            exact_s.append(time.perf_counter() - started)
        truth = truths[key]
        if not truth:
            continue
        short += len(got) < len(truth)
        recalls.append(len(set(got) & set(truth)) / len(truth))
    mean = float(np.mean(recalls)) if recalls else float("nan")
    log(f"recall {label}: {mean:.3f} over {len(recalls)} queries")
    return {
        "queries": len(recalls),
        "mean_recall": mean,
        "min_recall": float(np.min(recalls)) if recalls else float("nan"),
        "perfect": sum(r == 1.0 for r in recalls),
        "fewer_than_k": short,
        "hnsw_p50_s": _pct(hnsw_s, 50),
        "exact_p50_s": _pct(exact_s, 50),
    }


def run_recall_suite(
    user: User, embeddings: list[list[float]], seed_note_id: int, corpus: dict[str, Any]
) -> dict[str, Any]:
    """Recall rows: the whole account as shipped and at other ef_search values, then one
    note (as the planner chooses, and with the HNSW index forced), then one small note."""
    from search.retrieval import EF_SEARCH

    whole, single = scoped_notes(user, seed_note_id)
    n = len(embeddings)
    truths: dict[tuple[Any, ...], list[int]] = {}
    rows: list[dict[str, Any]] = []
    plans: dict[str, Any] = {}

    def row(label: str, share: float, scopes: list[Any], target: bool, **kw: Any) -> None:
        plans[label] = explain_plans(user, embeddings[0], scopes[0], **kw)
        result = run_recall(user, embeddings, scopes, truths, label, **kw)
        result["meets_target"] = result["mean_recall"] >= TARGET_RECALL
        uses_hnsw = plans[label]["vector_uses_hnsw"]
        rows.append(
            {"label": label, "share": share, "target": target, "hnsw": uses_hnsw, "result": result}
        )

    everything = [chunk_scope()] * n
    share = corpus["user_chunks"] / corpus["chunks"]
    label = "everything the bench user sees"
    row(label, share, everything, True)
    for ef in (ef for ef in EF_SWEEP if ef != EF_SEARCH):
        row(f"  same, ef_search {ef}", share, everything, False, ef_search=ef)
    for label, notes, runs in (
        ("one note: a whole copy", whole, ((False, True), (True, True))),
        ("one note: one attachment", single, ((True, False),)),
    ):
        if not notes:
            continue
        scopes = [chunk_scope(note_id=notes[i % len(notes)][0]) for i in range(n)]
        share = sum(c for _, c in notes) / len(notes) / corpus["chunks"]
        for force, target in runs:
            row(label + (", HNSW forced" if force else ""), share, scopes, target, force_hnsw=force)
    return {"ef_search": EF_SEARCH, "rows": rows, "plans": plans}


def scoped_notes(user: User, seed_note_id: int) -> tuple[list[tuple[int, int]], ...]:
    """(note id, chunks) of the bench user's synthetic notes: those holding a whole copy, and
    those holding one attachment with at least K chunks."""
    from django.db.models import Count

    from notes.selectors import visible_notes

    rows = (
        visible_notes(user=user)
        .exclude(pk=seed_note_id)
        .annotate(n_att=Count("attachments", distinct=True), n_chunks=Count("attachments__chunks"))
        .order_by("pk")
        .values_list("pk", "n_att", "n_chunks")
    )
    whole = [(pk, chunks) for pk, n_att, chunks in rows if n_att > 1]
    single = [(pk, chunks) for pk, n_att, chunks in rows if n_att == 1 and chunks >= K]
    return whole, single


# --- Report ----------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    from django.db import connection

    from core.embeddings import embedding_model_name

    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg = cursor.fetchone()[0]
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
        cursor.execute("SHOW shared_buffers")
        shared_buffers = cursor.fetchone()[0]
        cursor.execute("SHOW work_mem")
        work_mem = cursor.fetchone()[0]
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu_count": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem_gb, 1),
        "python": platform.python_version(),
        "postgres": pg,
        "pgvector": row[0] if row else None,
        "shared_buffers": shared_buffers,
        "work_mem": work_mem,
        "embedding_model": embedding_model_name(),
    }


def _ok(flag: bool) -> str:
    return "OK" if flag else "MISSED"


def print_report(report: dict[str, Any]) -> None:
    m = report.get("machine", {})
    print(
        f"Retrieval bench: {m.get('cpu_count')} CPUs ({m.get('cpu')}), {m.get('memory_gb')} GB, "
        f"PostgreSQL {m.get('postgres')}, pgvector {m.get('pgvector')}, shared_buffers "
        f"{m.get('shared_buffers')}, model {m.get('embedding_model')}"
    )
    c = report.get("corpus")
    if c:
        print(
            f"corpus: {c['chunks']:,} chunks, {c['vectors']:,} vectors, {c['attachments']:,} "
            f"attachments, {c['notes']:,} notes, {c['notebooks']:,} notebooks, {c['users']} users; "
            f"the bench user sees {c['user_chunks']:,} chunks "
            f"({100 * c['user_chunks'] / max(1, c['chunks']):.0f} %). HNSW index "
            f"{c['hnsw_size']}, chunkvector table+indexes {c['chunkvector_total_size']}, "
            f"documentchunk {c['documentchunk_total_size']}"
        )
    s, r = report.get("seed"), report.get("replicate")
    if s and r:
        sec = r["seconds"]
        print(
            f"build: seed ingest {s['seconds']:.0f}s ({s['ready_files']} ready files, "
            f"{s['chunks']} chunks) + replicate x{r['copies']} "
            f"(text {sec.get('chunk_text', 0):.0f}s, insert+tsvector "
            f"{sec.get('chunk_insert', 0):.0f}s, vectors {sec.get('vectors', 0):.0f}s, GIN "
            f"{sec.get('index_' + GIN_INDEX, 0):.0f}s, "
            f"HNSW {sec.get('index_' + HNSW_INDEX, 0):.0f}s, "
            f"VACUUM ANALYZE {sec.get('vacuum_analyze', 0):.0f}s) = "
            f"{report.get('build_seconds', 0):.0f}s; copies' vectors: {r['vectors']}, noise "
            f"sigma {r['noise_sigma']}, mean cosine to the seed window {r['mean_cosine_to_seed']}"
        )
    if "warmup_seconds" in report:
        print(f"warm-up (model load + {WARMUP_QUERIES} queries per mode, not counted): "
              f"{report['warmup_seconds']:.1f}s")  # fmt: skip
    print()

    lat = report.get("latency")
    if lat:
        print(
            f"== Latency: {lat['queries']} queries"
            + (f" (of {lat['planned']}: out of time)" if lat["queries"] < lat["planned"] else "")
            + " as the bench user over everything they see, "
            "ms (p50 / p95) =="
        )
        seen = {st for mode in lat["modes"].values() for st in mode["stages"]}
        first = [st for st in STAGE_ORDER if st in seen]
        stage_names = ["total", *first, *sorted(seen - set(first))]
        head = f"{'stage':<14}" + "".join(f"{mode:>22}" for mode in MODES)
        print(head)
        print("-" * len(head))
        for st in stage_names:
            cells = []
            for mode in MODES:
                fig = lat["modes"][mode]["total"] if st == "total" else (
                    lat["modes"][mode]["stages"].get(st)
                )  # fmt: skip
                cells.append(
                    f"{_ms(fig['p50']):>10} / {_ms(fig['p95']):>7}"
                    if fig
                    else f"{'':>10}   {'':>7}"
                )
            print(f"{st:<14}" + "".join(f"{cell:>22}" for cell in cells))
        print("-" * len(head))
        print(
            f"hybrid p95 / vector p95 = {lat['hybrid_vector_p95_ratio']:.2f}x   target <= "
            f"{TARGET_HYBRID_RATIO}x   {_ok(lat['meets_target'])}"
        )
        empty = {m: lat["modes"][m]["empty_results"] for m in MODES}
        print(
            f"(queries with no hit: {empty}; 1-min load average before/max during/after: "
            f"{lat['loadavg_before'][0]}/{lat['loadavg_1min_max']}/{lat['loadavg_after'][0]}; "
            "this process and its Postgres backend take turns, so above ~1.5 something else "
            "was running)"
        )
        print()

    rec = report.get("recall")
    if rec:
        print(
            f"== Recall@{K}: vector() (ef_search {rec.get('ef_search')} and iterative scans as "
            "shipped, unless said) vs an exact scan of the same scope =="
        )
        head = (
            f"{'scope':<38} {'share':>7} {'plan':>5} {'n':>4} {'recall':>7} {'min':>5} "
            f"{'<10':>4} {'ms':>6} {'exact ms':>8}  target"
        )
        print(head)
        print("-" * len(head))
        for row in rec["rows"]:
            fig = row["result"]
            verdict = (
                f">= {TARGET_RECALL} {_ok(fig['meets_target'])}" if row["target"] else "(info)"
            )
            print(
                f"{row['label']:<38} {row['share']:>7.2%} {'hnsw' if row['hnsw'] else 'scan':>5} "
                f"{fig['queries']:>4} {fig['mean_recall']:>7.3f} {fig['min_recall']:>5.2f} "
                f"{fig['fewer_than_k']:>4} {_ms(fig['hnsw_p50_s']):>6} "
                f"{_ms(fig['exact_p50_s']):>8}  {verdict}"
            )
        print("-" * len(head))
        exact_hnsw = [name for name, plan in rec["plans"].items() if plan["exact_uses_hnsw"]]
        print(
            "(share = the scope's chunks / all chunks; plan = what EXPLAIN shows vector() "
            f"using: {HNSW_INDEX} or a scan of the scope's rows; the exact scan never uses the "
            f"index: {'yes' if not exact_hnsw else 'NO, see ' + ', '.join(exact_hnsw)}; "
            "<10 = queries where vector() returned fewer rows than the exact scan; ms = p50 of "
            "one vector() call; HNSW forced = sorting disabled so the planner takes the index "
            "and its iterative scan must find 10 rows inside the note)"
        )
        print()


def print_growth(report: dict[str, Any]) -> None:
    """Latency per mode at each size side by side, and how p95 grew against the corpus."""
    parts = [report, *report.get("larger", [])]
    parts = [p for p in parts if p.get("latency") and p.get("corpus")]
    if len(parts) < 2:
        return
    first = parts[0]
    print("== Growth: ms (p50 / p95) per size; p95 growth vs corpus growth ==")
    head = f"{'chunks':>10}" + "".join(f"{mode:>18}" for mode in MODES) + f"{'recall@10':>11}"
    print(head)
    print("-" * len(head))
    for part in parts:
        modes = part["latency"]["modes"]
        recall = part.get("recall", {}).get("rows", [{}])[0].get("result", {}).get("mean_recall")
        print(
            f"{part['corpus']['chunks']:>10,}"
            + "".join(
                f"{_ms(modes[m]['total']['p50']):>9} / {_ms(modes[m]['total']['p95']):>6}"
                for m in MODES
            )
            + (f"{recall:>11.3f}" if recall is not None else "")
        )
    print("-" * len(head))
    base_chunks = first["corpus"]["chunks"]
    for part in parts[1:]:
        growth = part["corpus"]["chunks"] / base_chunks
        cells = []
        for m in MODES:
            ratio = (
                part["latency"]["modes"][m]["total"]["p95"]
                / first["latency"]["modes"][m]["total"]["p95"]
            )
            cells.append(f"{m} {ratio:.2f}x {_ok(ratio < growth)}")
        print(
            f"{part['corpus']['chunks']:,} vs {base_chunks:,} chunks ({growth:.2f}x): p95 "
            + ", ".join(cells)
            + " (OK = grew less than linearly)"
        )
    print()


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pdfs", type=Path, default=DEFAULT_PDFS, help="folder of seed PDFs")
    parser.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS)
    parser.add_argument(
        "--chunks",
        default="100000",
        help="corpus size (approx.); several sizes separated by commas (e.g. 100000,300000) "
        "grow one corpus and measure at each",
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--vectors",
        choices=("mix", "noise"),
        default="mix",
        help="how copies' vectors are made (see replicate())",
    )
    parser.add_argument(
        "--noise",
        type=float,
        help="per-dimension sigma of the Gaussian noise (default 0.01 with mix, 0.04 with noise)",
    )
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--max-seconds", type=int, default=1800, help="stop after this long")
    parser.add_argument("--keep-data", action="store_true", help="keep the temporary DATA_DIR")
    args = parser.parse_args(argv)
    try:
        args.sizes = sorted({int(x.replace("_", "")) for x in str(args.chunks).split(",") if x})
    except ValueError:
        parser.error("--chunks takes whole numbers separated by commas")
    if not args.sizes or args.sizes[0] < 1 or args.queries < 1:
        parser.error("--chunks and --queries must be positive")
    if args.noise is None:
        args.noise = 0.01 if args.vectors == "mix" else 0.04
    return args


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise BenchTimeout("terminated by SIGTERM")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = select_files(args.pdfs, "")
    out = args.json.resolve() if args.json else None
    questions = args.questions.resolve()
    work = Path(tempfile.mkdtemp(prefix="bench-retrieval-"))
    work.chmod(0o755)  # as root the embedded server runs as another user and must get in
    data_dir = work / "data"
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    code = 0
    started = time.perf_counter()
    django_ready = False
    latency_raw: list[tuple[dict[str, Any], dict[str, Any]]] = []
    # A SIGTERM (a CI job cancelled, a `kill`) ends the run like the deadline does, so the
    # embedded server is stopped and the temporary DATA_DIR removed rather than left running.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        with deadline(args.max_seconds):
            log(f"fresh database in {data_dir}")
            os.environ["DEBUG"] = "0"  # connection.queries would grow with every query
            setup_django(data_dir)
            django_ready = True
            from django.contrib.auth import get_user_model

            from core.embeddings import get_embedder

            report["machine"] = machine_info()
            log("loading the embedding model")
            get_embedder().embed(["load the model before the seed PDFs"])

            build = time.perf_counter()
            report["seed"] = ingest_seed(files)
            log(f"seed: {report['seed']['chunks']} chunks in {report['seed']['seconds']}s")
            user = get_user_model().objects.get(pk=report["seed"]["user_id"])
            rng = random.Random(args.seed)  # noqa: S311 - benchmark data, not secrets
            queries = make_queries(questions, args.queries, rng)
            first_copy = 0
            for number, size in enumerate(args.sizes):
                # Each size is measured as its own report; the first one's figures stay at the
                # top level, as before sizes could be given.
                part: dict[str, Any] = report if number == 0 else {}
                if number:
                    report.setdefault("larger", []).append(part)
                    build = time.perf_counter()
                part["replicate"] = replicate(
                    seed=report["seed"],
                    target_chunks=size,
                    vectors=args.vectors,
                    noise=args.noise,
                    seed_rng=args.seed,
                    first_copy=first_copy,
                )
                first_copy += part["replicate"]["copies"]
                part["build_seconds"] = round(time.perf_counter() - build, 1)
                part["corpus"] = corpus_stats(user)
                log(f"corpus: {part['corpus']}")
                # Recall first: it does not depend on the lexical leg, whose time varies most.
                log("embedding the queries for the recall runs")
                embeddings = get_embedder().embed(queries)
                part["recall"] = run_recall_suite(
                    user, embeddings, report["seed"]["note_id"], part["corpus"]
                )
                part["warmup_seconds"] = warm_up(user, queries)
                # The time left is shared out: the last size may use all of it.
                left = started + args.max_seconds - LATENCY_MARGIN_S - time.perf_counter()
                share = left if number == len(args.sizes) - 1 else left * 0.3
                raw: dict[str, Any] = {}
                latency_raw.append((part, raw))
                run_latency(user, queries, raw, time.perf_counter() + share)
    except BenchTimeout as exc:
        log(str(exc))
        report["error"] = str(exc)
        code = 2
    except Exception as exc:  # print what was measured before the failure
        traceback.print_exc()
        report["error"] = f"{type(exc).__name__}: {exc}"
        code = 1
    finally:
        for part, raw in latency_raw:
            if raw.get("done"):
                part["latency"] = summarize_latency(raw)
        report["run_seconds"] = round(time.perf_counter() - started, 1)
        if django_ready:
            teardown_django(data_dir, keep=args.keep_data)
        if not args.keep_data:
            shutil.rmtree(work, ignore_errors=True)

    print_report(report)
    for part in report.get("larger", []):
        print_report({"machine": report.get("machine", {}), "seed": report.get("seed"), **part})
    print_growth(report)
    print(f"run time: {report['run_seconds']:.0f}s")
    if out:
        out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        log(f"wrote {out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
