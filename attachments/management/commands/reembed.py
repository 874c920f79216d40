"""`manage.py reembed`: after changing the embedding model, make every chunk's vector match it.

If EMBEDDING_DIMENSIONS changed, the vector column is resized (its old vectors are dropped, the
HNSW index rebuilt); then every ready attachment whose chunks lack a vector from the
configured model is queued for embedding (or embedded right here with --sync).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.db.models import Q

from attachments import services
from attachments.models import DocumentChunk, NoteAttachment
from notebook.embeddings import embedding_model_name

TABLE = DocumentChunk._meta.db_table
INDEX = "chunk_embedding_hnsw"


def column_dimensions() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attname = 'embedding'",
            [TABLE],
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
                cursor.execute(f"DROP INDEX IF EXISTS {INDEX}")
                cursor.execute(
                    f"ALTER TABLE {TABLE} ALTER COLUMN embedding TYPE vector({int(wanted)}) "
                    "USING NULL"
                )
                cursor.execute(
                    f"CREATE INDEX {INDEX} ON {TABLE} USING hnsw (embedding vector_cosine_ops) "
                    "WITH (m = 16, ef_construction = 64)"
                )
            self.stdout.write(f"Resized vectors from {current} to {wanted} dimensions.")
        if options["all"]:
            DocumentChunk.objects.update(embedding=None)
        stale = DocumentChunk.objects.filter(Q(embedding__isnull=True) | ~Q(embedding_model=model))
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
                from django_q.tasks import async_task

                async_task("attachments.tasks.reembed_attachment", pk, group="reembed")
        verb = "Re-embedded" if options["sync"] else "Queued for re-embedding:"
        self.stdout.write(self.style.SUCCESS(f"{verb} {len(ids)} attachment(s) with {model}."))
