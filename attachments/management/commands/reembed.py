"""`manage.py reembed`: after changing the embedding model, make every vector match it.

If EMBEDDING_DIMENSIONS changed, the vector columns (chunks' and notes') are resized: their old
vectors are dropped and the HNSW indexes rebuilt. Then every ready attachment whose chunks lack
vectors from the configured model, and every such note, is queued for embedding (or embedded
right here with --sync). The layers above keep vectors too (intelligence: the profiles'
document vectors): `attachments.signals.vectors_resized` and `reembedding` tell them to resize
and re-embed theirs.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from attachments import services, signals
from attachments.models import ChunkVector, DocumentChunk, NoteAttachment
from attachments.services.files import enqueue_reembed
from core.embeddings import embedding_model_name
from notes.indexing import note_embed, note_enqueue_embedding, notes_needing_embedding
from notes.models import Note, NoteVector

# (vector table, its HNSW index, the table whose rows record which model they were embedded with)
VECTOR_TABLES = (
    (ChunkVector._meta.db_table, "chunkvector_embedding_hnsw", DocumentChunk._meta.db_table),
    (NoteVector._meta.db_table, "notevector_embedding_hnsw", Note._meta.db_table),
)


def column_dimensions(table: str = ChunkVector._meta.db_table) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attname = 'embedding'",
            [table],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


class Command(BaseCommand):
    help = "Re-embed chunks with the configured embedding model (resizing vectors if needed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--yes", action="store_true", help="Resize without asking.")
        parser.add_argument(
            "--all", action="store_true", help="Re-embed every chunk, even up-to-date ones."
        )
        parser.add_argument(
            "--sync", action="store_true", help="Embed here instead of queueing for workers."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        wanted = settings.EMBEDDING_DIMENSIONS
        current = column_dimensions()
        model = embedding_model_name()
        if current != wanted:
            if not options["yes"]:
                raise CommandError(
                    f"The vectors have {current} dimensions and EMBEDDING_DIMENSIONS is {wanted}. "
                    "Resizing drops every stored vector (keyword search keeps working until "
                    "they are rebuilt). Run again with --yes to go ahead."
                )
            with transaction.atomic(), connection.cursor() as cursor:
                # Deferred foreign-key checks of earlier writes in this transaction would
                # otherwise block the ALTER ("pending trigger events").
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                for table, index, owner in VECTOR_TABLES:
                    cursor.execute(f"DROP INDEX IF EXISTS {index}")
                    cursor.execute(f"DELETE FROM {table}")  # noqa: S608 - our table names
                    cursor.execute(
                        f"ALTER TABLE {table} ALTER COLUMN embedding TYPE vector({int(wanted)})"
                    )
                    cursor.execute(
                        f"CREATE INDEX {index} ON {table} USING hnsw "
                        "(embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
                    )
                    cursor.execute(f"UPDATE {owner} SET embedding_model = ''")  # noqa: S608
                signals.vectors_resized.send(sender=Command, cursor=cursor, dimensions=wanted)
            self.stdout.write(f"Resized vectors from {current} to {wanted} dimensions.")
        if options["all"]:
            DocumentChunk.objects.update(embedding_model="")
            Note.objects.update(embedding_model="")
        for _, done in signals.reembedding.send(
            sender=Command, model=model, everything=options["all"]
        ):
            if done:
                self.stdout.write(f"Re-embedded {done} with {model}.")
        for pk in notes_needing_embedding():
            if options["sync"]:
                note_embed(note_id=pk)
            else:
                note_enqueue_embedding(note_id=pk)
        stale = DocumentChunk.objects.exclude(embedding_model=model)
        ids = list(
            NoteAttachment.objects.filter(status=NoteAttachment.Status.READY, chunks__in=stale)
            .distinct()
            .values_list("pk", flat=True)
        )
        if not ids:
            self.stdout.write(f"Every chunk already has a {model} vector. Nothing to do.")
            return
        for pk in ids:
            if options["sync"]:
                services.attachment_reembed(attachment_id=pk)
            else:
                enqueue_reembed(pk, group="reembed")
        verb = "Re-embedded" if options["sync"] else "Queued for re-embedding:"
        self.stdout.write(self.style.SUCCESS(f"{verb} {len(ids)} attachment(s) with {model}."))
