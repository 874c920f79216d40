"""Reuse by hash: a PDF whose very bytes (SHA-256) its uploader already has ingested, ready, with
the configured embedding model, is copied row for row — pages, chunks with their tsvectors,
vectors, BM25 posting lists — instead of being extracted, OCR'd and embedded again.

The copy belongs to the new attachment alone: deleting, reprocessing or re-chunking either one
leaves the other as it was. Never across users: the source must have the same uploader and
belong to a notebook of the same owner. The ingestion run calls this after claiming its row
(ingestion._reuse), under the run's fencing.
"""

from __future__ import annotations

from django.db import connection

from attachments.models import ChunkVector, DocumentChunk, DocumentPage, NoteAttachment, PostingList

Status = NoteAttachment.Status

# What the copy takes over from the source's row besides its rows in other tables: what
# extraction, OCR, language detection and indexing wrote there.
COPIED_FIELDS = (
    "page_count",
    "ocr_pages",
    "language",
    "search_config",
    "embedding_model",
    "chunk_count",
    "token_total",
)


def reusable_source(*, attachment: NoteAttachment, model: str) -> NoteAttachment | None:
    """The most recently ready attachment with `attachment`'s bytes, its uploader and its
    notebook's owner, embedded with `model`; None when there is none (another user's never
    counts, nor one still being processed). Only for a file never ready before: "Reprocess"
    of a ready file asks for a fresh ingestion, not for another copy."""
    if attachment.uploaded_by_id is None or attachment.ready_at is not None:
        return None
    if attachment.source_url:  # a link is fetched afresh: the page may have changed
        return None
    owner_id = (
        NoteAttachment.objects.filter(pk=attachment.pk)
        .values_list("note__notebook__owner_id", flat=True)
        .first()
    )
    return (
        NoteAttachment.objects.filter(
            sha256=attachment.sha256,
            status=Status.READY,
            embedding_model=model,
            uploaded_by_id=attachment.uploaded_by_id,
            note__notebook__owner_id=owner_id,
            chunk_count__gt=0,
        )
        .exclude(pk=attachment.pk)
        .order_by("-ready_at", "-pk")
        .first()
    )


def lock_source(*, source_id: int, model: str) -> NoteAttachment | None:
    """Lock the source's row FOR SHARE until the end of the transaction and return it if it is
    still ready with `model`: its delete, reprocess, re-chunk or re-embed waits (each writes
    or locks that row first), so its rows cannot change while they are copied."""
    table = NoteAttachment._meta.db_table
    found = NoteAttachment.objects.raw(
        f"SELECT * FROM {table} WHERE id = %s AND status = %s AND embedding_model = %s "  # noqa: S608
        "FOR SHARE",
        [source_id, Status.READY, model],
    )
    return next(iter(found), None)


def _columns(model: type, *skip: str) -> list[str]:
    quote = connection.ops.quote_name
    return [
        quote(f.column)
        for f in model._meta.concrete_fields  # type: ignore[attr-defined]
        if f.name not in ("id", "attachment", *skip)
    ]


def copy_ingested(*, source_id: int, target_id: int) -> None:
    """Replace the target's pages, chunks, vectors and posting lists with copies of the
    source's, in set-based SQL (INSERT … SELECT). Run it inside a transaction holding
    lock_source. Chunks are matched by their index; posting lists get the new chunk ids."""
    pages = DocumentPage._meta.db_table
    chunks = DocumentChunk._meta.db_table
    vectors = ChunkVector._meta.db_table
    postings = PostingList._meta.db_table
    page_cols = ", ".join(_columns(DocumentPage))
    chunk_cols = ", ".join(_columns(DocumentChunk))
    vector_cols = _columns(ChunkVector, "chunk")
    quote = connection.ops.quote_name
    ix = quote("index")
    with connection.cursor() as cursor:
        # Idempotent: whatever an earlier run of the target left goes first.
        for table in (vectors, postings):
            cursor.execute(f"DELETE FROM {table} WHERE attachment_id = %s", [target_id])  # noqa: S608
        for table in (chunks, pages):
            cursor.execute(f"DELETE FROM {table} WHERE attachment_id = %s", [target_id])  # noqa: S608
        cursor.execute(
            f"INSERT INTO {pages} (attachment_id, {page_cols}) "  # noqa: S608 - names are ours
            f"SELECT %s, {page_cols} FROM {pages} WHERE attachment_id = %s ORDER BY number",
            [target_id, source_id],
        )
        cursor.execute(
            f"INSERT INTO {chunks} (attachment_id, {chunk_cols}) "  # noqa: S608
            f"SELECT %s, {chunk_cols} FROM {chunks} WHERE attachment_id = %s ORDER BY {ix}",
            [target_id, source_id],
        )
        # Source chunk id → target chunk id, by index (unique per attachment).
        mapping = (
            f"SELECT o.id AS old_id, n.id AS new_id FROM {chunks} o "  # noqa: S608
            f"JOIN {chunks} n ON n.attachment_id = %s AND n.{ix} = o.{ix} "
            "WHERE o.attachment_id = %s"
        )
        cursor.execute(
            f"INSERT INTO {vectors} (chunk_id, attachment_id, {', '.join(vector_cols)}) "  # noqa: S608
            f"SELECT m.new_id, %s, {', '.join(f'v.{c}' for c in vector_cols)} "
            f"FROM {vectors} v JOIN ({mapping}) m ON m.old_id = v.chunk_id "
            "WHERE v.attachment_id = %s",
            [target_id, target_id, source_id, source_id],
        )
        # A posting list holds chunk ids in ascending order with their term frequencies and
        # lengths beside them: map every id, then sort the three arrays by the new ids.
        cursor.execute(
            f"INSERT INTO {postings} (attachment_id, lexeme, df, chunk_ids, tfs, lens) "  # noqa: S608
            "SELECT %s, p.lexeme, min(p.df), array_agg(m.new_id ORDER BY m.new_id), "
            "  array_agg(p.tfs[u.ord] ORDER BY m.new_id), "
            "  array_agg(p.lens[u.ord] ORDER BY m.new_id) "
            f"FROM {postings} p CROSS JOIN LATERAL unnest(p.chunk_ids) WITH ORDINALITY u(id, ord) "
            f"JOIN ({mapping}) m ON m.old_id = u.id "
            "WHERE p.attachment_id = %s GROUP BY p.lexeme",
            [target_id, target_id, source_id, source_id],
        )
