"""Re-embedding every source and note with another model in the background, without downtime.

`manage.py reembed --background --to-model …` opens a `VectorBuild` for the new model and
creates, beside each live vector table (chunks', notes'), a table of the same shape named
`<table>_next` with the new model's size. Background jobs (core.jobs, as one more user, so
users' own work keeps its turn) embed each ready source's chunks, and then the notes, into
those tables with the new model. Search never reads them: the settings still name the old
model, so questions are embedded with it and compared with the live vectors, as before.

Whatever changes meanwhile is caught by what is *missing* from the next tables, computed
from the live rows, never by a record of what was done: a source that becomes ready (an
upload, a reprocess) is queued on `source_ready`; a deleted or re-chunked source's rows go
with its chunks (the next tables' foreign keys cascade); a note edited after its vectors were
made no longer matches their stamp (its `updated_at`). When nothing is missing the build's
last job builds the next tables' indexes (HNSW included) and marks it complete.

The switch (`switch`: `manage.py serve` at start, `manage.py reembed --switch`, or the last
job when its own settings already name the new model) happens only when the settings name
the build's model: under an exclusive lock of both live tables it checks once more that
nothing is missing, drops the live tables, renames the next ones, their indexes, constraints
and sequences to the live names, records the new model on every covered chunk and note, and
tells the layers above (`attachments.signals`: intelligence resizes and re-embeds its
profiles' document vectors). Search waits for the lock for the length of that transaction
(renames and one UPDATE), not for the re-embedding. Anything still missing at that moment
goes back to building instead.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from attachments import signals
from attachments.models import ChunkVector, DocumentChunk, NoteAttachment, VectorBuild
from core import embeddings
from core.jobs import job_submit
from core.models import Job
from notes.indexing import note_search_text
from notes.models import Note, NoteVector

logger = logging.getLogger(__name__)
State = VectorBuild.State
OPEN = (State.BUILDING, State.COMPLETE)
SOURCE_TASK = "attachments.tasks.vectors_next_source"
NOTES_TASK = "attachments.tasks.vectors_next_notes"
NOTES_BATCH = 64
RETRIES = 3  # a source whose chunks changed while they were embedded is read again


@dataclass(frozen=True)
class Table:
    """One live vector table and what its rows belong to."""

    live: str
    owner: str  # the column naming the chunk or note
    stamped: bool  # next rows carry the owner's updated_at (notes change in place)

    @property
    def next(self) -> str:
        return f"{self.live}_next"


CHUNKS = Table(ChunkVector._meta.db_table, "chunk_id", stamped=False)
NOTES = Table(NoteVector._meta.db_table, "note_id", stamped=True)
TABLES = (CHUNKS, NOTES)


class BuildError(Exception):
    """What an operator asked cannot be done now; the message says why and what to do."""


# --- Opening, cancelling, reading ------------------------------------------------------------


def open_build() -> VectorBuild | None:
    return VectorBuild.objects.filter(is_open=True).first()


def build_start(
    *, backend: str, model: str, dimensions: int, base_url: str, runtime: str
) -> VectorBuild:
    """Open a build for the target model, create its next tables and queue every source and
    the notes. Refuses when one is open already or when the target is the configured model."""
    target_config = embeddings.config_of(backend, model, dimensions, base_url, runtime)
    if embeddings.same_vectors(target_config, embeddings.configured()):
        raise BuildError(
            "That is the configured embedding model already: the live vectors are its own. "
            "`manage.py reembed` (without --background) fills in what lacks a vector."
        )
    _probe(target_config)
    with transaction.atomic():
        if open_build() is not None:
            raise BuildError(
                "A re-embedding is open already (`manage.py reembed --status`); cancel it with "
                "`manage.py reembed --cancel` before starting another."
            )
        build = VectorBuild.objects.create(
            backend=backend,
            model=model,
            model_name=embeddings.model_name_of(backend, model),
            dimensions=dimensions,
            base_url=base_url if backend == "openai" else "",
            runtime=runtime if backend == "local" else "",
        )
        with connection.cursor() as cursor:
            for table in TABLES:
                _create_next(cursor, table, dimensions)
        transaction.on_commit(lambda: advance(build_id=build.pk))
    return build


def _probe(config: embeddings.Config) -> None:
    """The new model answers, with vectors of its size, before anything is built."""
    try:
        embeddings.embedder_for(config).embed(["Can the new model embed this?"])
    except Exception as exc:
        raise BuildError(f"The new model could not embed a test sentence: {exc}") from exc


def build_cancel() -> VectorBuild | None:
    """Close the open build and drop its next tables; the live vectors are untouched."""
    with transaction.atomic():
        build = VectorBuild.objects.select_for_update().filter(is_open=True).first()
        if build is None:
            return None
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            for table in TABLES:
                cursor.execute(f"DROP TABLE IF EXISTS {table.next}")
        build.state, build.is_open = State.CANCELLED, False
        build.save(update_fields=["state", "is_open"])
    return build


@dataclass(frozen=True)
class Status:
    build: VectorBuild
    sources: int  # ready sources
    sources_missing: int  # ready sources with a chunk the next table lacks
    notes: int  # notes with text
    notes_missing: int
    settings_match: bool  # the settings name the build's model (the switch may happen)
    failed: int = 0  # the build's jobs that failed for good (`manage.py reembed --retry`)
    error: str = ""  # the last one's error


def build_status() -> Status | None:
    """The open build (else the latest) and how far it has come."""
    build = open_build() or VectorBuild.objects.first()
    if build is None:
        return None
    ready = NoteAttachment.objects.filter(status=NoteAttachment.Status.READY).count()
    notes = Note.objects.values_list("title", "body")
    texts = sum(1 for title, body in notes if _has_text(title, body))
    missing: list[int] = []
    notes_missing = 0
    if build.is_open:
        missing, notes_missing = missing_sources(), len(missing_notes())
    # Jobs that failed for good on what is still missing (a server down, a wrong key).
    still = set(missing)
    failed = [
        (args, error)
        for args, error in Job.objects.filter(
            func__in=[SOURCE_TASK, NOTES_TASK], state=Job.State.FAILED
        )
        .order_by("-finished_at")
        .values_list("args", "error")
        if args[0] == build.pk and (args[1] in still if len(args) > 1 else notes_missing)
    ]
    return Status(
        build, ready, len(missing), texts, notes_missing, settings_name(build),
        failed=len(failed), error=failed[0][1] if failed else "",
    )  # fmt: skip


def target(build: VectorBuild) -> embeddings.Config:
    return embeddings.config_of(
        build.backend, build.model, build.dimensions, build.base_url, build.runtime
    )


def settings_name(build: VectorBuild) -> bool:
    """Whether this process's settings name the build's model."""
    return embeddings.same_vectors(target(build), embeddings.configured())


# --- The next tables -------------------------------------------------------------------------


def column_dimensions(table: str = CHUNKS.live) -> int:
    """The size of a vector table's `embedding` column (0 if it has none)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attname = 'embedding'",
            [table],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _constraints(cursor: Any, table: str) -> list[tuple[str, str, str, str | None]]:
    """(name, type p|u|f|c, definition, backing index) of a table's constraints."""
    cursor.execute(
        "SELECT conname, contype, pg_get_constraintdef(oid), "
        "CASE WHEN conindid <> 0 THEN conindid::regclass::text END "
        "FROM pg_constraint WHERE conrelid = %s::regclass ORDER BY conname",
        [table],
    )
    return [(str(a), str(b), str(c), d) for a, b, c, d in cursor.fetchall()]


def _indexes(cursor: Any, table: str) -> list[tuple[str, str, str]]:
    """(name, definition, access method) of a table's indexes."""
    cursor.execute(
        "SELECT i.relname, pg_get_indexdef(i.oid), am.amname FROM pg_index x "
        "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_am am ON am.oid = i.relam "
        "WHERE x.indrelid = %s::regclass ORDER BY i.relname",
        [table],
    )
    return [(str(a), str(b), str(c)) for a, b, c in cursor.fetchall()]


def _temporary(table: Table, name: str) -> str:
    """The name an index or constraint of the live table has on the next table until the
    switch: short (Postgres cuts names at 63 bytes) and unique per live name."""
    return f"nx_{hashlib.blake2b(f'{table.live}.{name}'.encode(), digest_size=8).hexdigest()}"


_INDEX_HEAD = re.compile(r"^CREATE (UNIQUE )?INDEX \S+ ON \S+ ")


def _index_on_next(table: Table, name: str, definition: str) -> str:
    temp = _temporary(table, name)
    return _INDEX_HEAD.sub(
        lambda m: f"CREATE {m.group(1) or ''}INDEX IF NOT EXISTS {temp} ON {table.next} ",
        definition,
    )


def _create_next(cursor: Any, table: Table, dimensions: int) -> None:
    """The next table: the live one's columns, defaults, identity and checks, the new size;
    its unique and foreign keys (cascading, so that a deleted chunk or note takes its new
    vectors along: Django's deletes know only the live table) and its B-tree indexes under
    temporary names. The HNSW index waits for the rows (`_finish_indexes`)."""
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # DDL refuses pending deferred checks
    cursor.execute(f"DROP TABLE IF EXISTS {table.next}")
    cursor.execute(
        f"CREATE TABLE {table.next} (LIKE {table.live} "
        "INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS)"
    )
    cursor.execute(
        f"ALTER TABLE {table.next} ALTER COLUMN embedding TYPE vector({int(dimensions)})"
    )
    if table.stamped:
        cursor.execute(f"ALTER TABLE {table.next} ADD COLUMN stamp timestamptz NOT NULL")
    backing = set()
    for name, kind, definition, index in _constraints(cursor, table.live):
        if kind == "f":
            cascading = re.sub(r"(REFERENCES \S+\([^)]*\))", r"\1 ON DELETE CASCADE", definition)
            cursor.execute(
                f"ALTER TABLE {table.next} ADD CONSTRAINT {_temporary(table, name)} {cascading}"
            )
        elif kind in ("p", "u") and index:
            backing.add(index)
    for name, definition, method in _indexes(cursor, table.live):
        if method != "hnsw" or name in backing:
            cursor.execute(_index_on_next(table, name, definition))


def _finish_indexes(cursor: Any) -> None:
    """The next tables' remaining indexes (HNSW, built once over every row: faster than row
    by row), and fresh planner statistics."""
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # DDL refuses pending deferred checks
    for table in TABLES:
        for name, definition, method in _indexes(cursor, table.live):
            if method == "hnsw":
                cursor.execute(_index_on_next(table, name, definition))
        cursor.execute(f"ANALYZE {table.next}")


# --- What is missing -------------------------------------------------------------------------


def _has_text(title: str, body: str) -> bool:
    return bool(note_search_text(title, body))


def missing_sources() -> list[int]:
    """Ready sources with a chunk the next table has no vector for."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT c.attachment_id FROM {DocumentChunk._meta.db_table} c "  # noqa: S608
            f"JOIN {NoteAttachment._meta.db_table} a ON a.id = c.attachment_id "
            "WHERE a.status = %s AND NOT EXISTS "
            f"(SELECT 1 FROM {CHUNKS.next} n WHERE n.chunk_id = c.id) ORDER BY 1",
            [NoteAttachment.Status.READY],
        )
        return [int(pk) for (pk,) in cursor.fetchall()]


def missing_notes() -> list[int]:
    """Notes with text whose next vectors are absent or older than their last change."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT note_id, stamp FROM {NOTES.next}")  # noqa: S608
        have = {(int(pk), stamp) for pk, stamp in cursor.fetchall()}
    return [
        pk
        for pk, title, body, updated in Note.objects.order_by("pk").values_list(
            "pk", "title", "body", "updated_at"
        )
        if _has_text(title, body) and (pk, updated) not in have
    ]


# --- Background work -------------------------------------------------------------------------


def _queued(func: str) -> set[tuple[Any, ...]]:
    """The argument lists of this task's jobs that are waiting or running."""
    rows = Job.objects.filter(func=func, state__in=[Job.State.PENDING, Job.State.RUNNING])
    return {tuple(args) for args in rows.values_list("args", flat=True)}


def advance(*, build_id: int) -> str:
    """Queue what the open build still misses, or, when nothing is, build the next tables'
    indexes and mark it complete (and switch, when this process's settings name its model).
    Returns the state it left the build in."""
    with transaction.atomic():
        build = VectorBuild.objects.select_for_update().filter(pk=build_id, is_open=True).first()
        if build is None:
            return "closed"
        sources, notes = missing_sources(), missing_notes()
        if sources or notes:
            queued = _queued(SOURCE_TASK)
            for pk in sources:
                if (build.pk, pk) not in queued:
                    _queue_source(build.pk, pk)
            if notes and (build.pk,) not in _queued(NOTES_TASK):
                job_submit(NOTES_TASK, build.pk, user_id=None, group="reembed", max_attempts=3)
            if build.state != State.BUILDING:
                build.state, build.completed_at = State.BUILDING, None
                build.save(update_fields=["state", "completed_at"])
            return State.BUILDING
        if build.state == State.BUILDING:
            with connection.cursor() as cursor:
                _finish_indexes(cursor)
            build.state, build.completed_at = State.COMPLETE, timezone.now()
            build.save(update_fields=["state", "completed_at"])
            logger.info("re-embedding with %s complete: waiting for the settings", build.model_name)
    if settings_name(build):
        return switch()
    return State.COMPLETE


def _fenced(cursor: Any, build_id: int) -> bool:
    """In a write's transaction: whether the build is still open (a cancel waits for us)."""
    cursor.execute(
        f"SELECT 1 FROM {VectorBuild._meta.db_table} WHERE id = %s AND is_open FOR SHARE",  # noqa: S608
        [build_id],
    )
    return cursor.fetchone() is not None


def _copy(cursor: Any, table: str, columns: str, rows: list[tuple[Any, ...]]) -> None:
    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def _literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{v:.7g}" for v in vector) + "]"


def build_source(*, build_id: int, attachment_id: int) -> bool:
    """Embed one ready source's chunks with the build's model into the next table (replacing
    what it had there); False when the build closed or the source is not ready (its next
    ready signal queues it again). Chunks replaced while they were embedded (a re-chunking)
    are read and embedded again, a few times at most."""
    for _ in range(RETRIES):
        written = _build_source_once(build_id, attachment_id)
        if written is not None:
            return written
    return False


def _build_source_once(build_id: int, attachment_id: int) -> bool | None:
    """build_source's one try; None when the chunks changed while they were embedded."""
    build = VectorBuild.objects.filter(pk=build_id, is_open=True).first()
    ready = NoteAttachment.Status.READY
    if build is None or not NoteAttachment.objects.filter(pk=attachment_id, status=ready).exists():
        return False
    chunks = list(
        DocumentChunk.objects.filter(attachment_id=attachment_id)
        .order_by("index")
        .values_list("pk", "content", "heading_path")
    )
    embedder = embeddings.embedder_for(target(build))
    windows = [
        embedder.windows(content, prefix=" › ".join(path)) or [content]
        for _, content, path in chunks
    ]
    vectors = iter(embedder.embed([w for ws in windows for w in ws]))
    rows = [
        (pk, attachment_id, n, _literal(next(vectors)))
        for (pk, _, _), ws in zip(chunks, windows, strict=True)
        for n in range(len(ws))
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        if not _fenced(cursor, build_id):
            return False
        locked = NoteAttachment.objects.select_for_update().filter(pk=attachment_id, status=ready)
        if not locked.exists():
            return False
        now = DocumentChunk.objects.filter(attachment_id=attachment_id).values_list("pk", flat=True)
        if set(now) != {pk for pk, _, _ in chunks}:
            return None
        cursor.execute(f"DELETE FROM {CHUNKS.next} WHERE attachment_id = %s", [attachment_id])  # noqa: S608
        _copy(cursor, CHUNKS.next, 'chunk_id, attachment_id, "window", embedding', rows)
    return True


def build_notes(*, build_id: int) -> int:
    """Embed every note the next table misses (or holds older vectors of) with the build's
    model, a batch at a time; a note edited while it was embedded is left for the next
    run (its stamp no longer matches). The number of notes written."""
    build = VectorBuild.objects.filter(pk=build_id, is_open=True).first()
    if build is None:
        return 0
    embedder = embeddings.embedder_for(target(build))
    todo = missing_notes()
    written = 0
    for start in range(0, len(todo), NOTES_BATCH):
        notes = list(
            Note.objects.filter(pk__in=todo[start : start + NOTES_BATCH]).values_list(
                "pk", "title", "body", "updated_at"
            )
        )
        texts = [note_search_text(title, body) for _, title, body, _ in notes]
        windows = [embedder.windows(text) or [text] for text in texts]
        vectors = iter(embedder.embed([w for ws in windows for w in ws]))
        made = [[_literal(next(vectors)) for _ in ws] for ws in windows]
        with transaction.atomic(), connection.cursor() as cursor:
            if not _fenced(cursor, build_id):
                return written
            current = dict(
                Note.objects.select_for_update()
                .filter(pk__in=[pk for pk, *_ in notes])
                .values_list("pk", "updated_at")
            )
            rows = []
            for (pk, _, _, updated), vecs in zip(notes, made, strict=True):
                if current.get(pk) != updated:
                    continue  # edited (or deleted) meanwhile: missing again
                rows += [(pk, n, vec, updated) for n, vec in enumerate(vecs)]
                written += 1
            ids = list({row[0] for row in rows})
            cursor.execute(f"DELETE FROM {NOTES.next} WHERE note_id = ANY(%s)", [ids])  # noqa: S608
            _copy(cursor, NOTES.next, 'note_id, "window", embedding, stamp', rows)
    return written


def on_source_ready(sender: Any = None, *, attachment_id: int, **kwargs: Any) -> None:
    """`attachments.signals.source_ready` (connected in AppConfig.ready): a source became
    ready while a build is open, so it needs vectors of the new model too."""
    build = open_build()
    if build is not None:
        _queue_source(build.pk, attachment_id)


def _queue_source(build_id: int, attachment_id: int) -> None:
    """One source's new vectors as a job of no user: the re-embedding takes turns with the
    users' own work as one more user (core.jobs)."""
    job_submit(SOURCE_TASK, build_id, attachment_id, user_id=None, group="reembed", max_attempts=3)


# --- The switch ------------------------------------------------------------------------------


def _swap(cursor: Any, table: Table) -> list[str]:
    """Drop the live table and give the next one its name, indexes, constraints and identity
    sequence (the caller holds both tables' locks). Returns the foreign keys to validate."""
    constraints = _constraints(cursor, table.live)
    indexes = _indexes(cursor, table.live)
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id'), pg_get_serial_sequence(%s, 'id')",
                   [table.live, table.next])  # fmt: skip
    live_sequence, next_sequence = cursor.fetchone()
    cursor.execute(f"DROP TABLE {table.live}")
    cursor.execute(f"ALTER TABLE {table.next} RENAME TO {table.live}")
    if table.stamped:
        cursor.execute(f"ALTER TABLE {table.live} DROP COLUMN stamp")
    if live_sequence and next_sequence:
        cursor.execute(f"ALTER SEQUENCE {next_sequence} RENAME TO {live_sequence.split('.')[-1]}")
    backing = {index: (name, kind) for name, kind, _, index in constraints if index}
    validate = []
    for name, kind, definition, _ in constraints:
        if kind == "f":  # Django's own key (not cascading), checked after the commit
            cursor.execute(f"ALTER TABLE {table.live} DROP CONSTRAINT {_temporary(table, name)}")
            cursor.execute(f"ALTER TABLE {table.live} ADD CONSTRAINT {name} {definition} NOT VALID")
            validate.append(f"ALTER TABLE {table.live} VALIDATE CONSTRAINT {name}")
    for name, _, _ in indexes:
        temp = _temporary(table, name)
        if name in backing:
            constraint, kind = backing[name]
            what = "PRIMARY KEY" if kind == "p" else "UNIQUE"
            cursor.execute(
                f"ALTER TABLE {table.live} ADD CONSTRAINT {constraint} {what} USING INDEX {temp}"
            )
            if constraint != name:
                cursor.execute(f"ALTER INDEX {constraint} RENAME TO {name}")
        else:
            cursor.execute(f"ALTER INDEX {temp} RENAME TO {name}")
    return validate


def switch() -> str:
    """Swap the complete build's vectors in when the settings name its model. Returns what
    happened: "switched", "building" (something was missing: queued), "waiting" (the settings
    name another model) or "none" (no complete build)."""
    build = VectorBuild.objects.filter(is_open=True, state=State.COMPLETE).first()
    if build is None:
        return "none"
    if not settings_name(build):
        return "waiting"
    validate: list[str] = []
    with transaction.atomic():
        build = VectorBuild.objects.select_for_update().get(pk=build.pk)
        if build.state != State.COMPLETE or not build.is_open:
            return "none"
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no deferred checks on these tables
            tables = ", ".join(f"{t.live}, {t.next}" for t in TABLES)
            cursor.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE")
            if missing_sources() or missing_notes():
                pass  # advance (below, after this transaction) queues them
            else:
                cursor.execute(
                    f"UPDATE {DocumentChunk._meta.db_table} c SET embedding_model = CASE WHEN "  # noqa: S608
                    f"EXISTS (SELECT 1 FROM {CHUNKS.next} n WHERE n.chunk_id = c.id) "
                    "THEN %s ELSE '' END",
                    [build.model_name],
                )
                cursor.execute(
                    f"UPDATE {Note._meta.db_table} o SET embedding_model = CASE WHEN "  # noqa: S608
                    f"EXISTS (SELECT 1 FROM {NOTES.next} n WHERE n.note_id = o.id) "
                    "THEN %s ELSE '' END",
                    [build.model_name],
                )
                NoteAttachment.objects.filter(status=NoteAttachment.Status.READY).update(
                    embedding_model=build.model_name
                )
                resized = build.dimensions != column_dimensions(CHUNKS.live)
                for table in TABLES:
                    validate += _swap(cursor, table)
                if resized:  # the layers above resize theirs in this transaction
                    signals.vectors_resized.send(
                        sender=VectorBuild, cursor=cursor, dimensions=build.dimensions
                    )
                build.state, build.is_open = State.SWITCHED, False
                build.switched_at = timezone.now()
                build.save(update_fields=["state", "is_open", "switched_at"])
    if build.state != State.SWITCHED:
        return advance(build_id=build.pk)
    with connection.cursor() as cursor:
        for statement in validate:
            cursor.execute(statement)
    # The layers above re-embed what they keep (intelligence: the profiles' vectors).
    signals.reembedding.send(sender=VectorBuild, model=build.model_name, everything=False)
    logger.info("switched to the vectors of %s", build.model_name)
    return State.SWITCHED


def at_start() -> str:
    """What a starting server says of the re-embedding (after `migrate`): it switches a
    complete build whose model the settings name; "" when there is nothing to say."""
    build = open_build()
    if build is None:
        return ""
    if build.state == State.COMPLETE:
        done = switch()
        if done == State.SWITCHED:
            return f"Embedding: switched to the vectors of {build.model_name}."
        if done == "waiting":
            return (
                f"Embedding: the re-embedding with {build.model_name} is complete; set the "
                "EMBEDDING_* settings to it and restart to switch."
            )
    if settings_name(build):
        return (
            f"Embedding: the settings name {build.model_name}, whose re-embedding is not "
            "complete: questions are embedded with it but compared with the old vectors until "
            "it is (`manage.py reembed --status`). Restart with the previous settings to keep "
            "search as it was meanwhile."
        )
    return f"Embedding: re-embedding with {build.model_name} in the background."
