"""`manage.py reembed`: make every vector match an embedding model.

In the background, without downtime (docs/ingestion.md, "Changing the embedding model"):
with the settings still naming the current model, `reembed --background --to-model M
[--to-backend …] [--to-dimensions N] [--to-base-url URL] [--to-runtime onnx-int8]` embeds
everything with M beside the live vectors while search goes on using those;
`reembed --status` says how far it is; once it is complete, set the EMBEDDING_* settings
to M and restart: `manage.py serve` (or `reembed --switch`, for other deployments, as a
release step beside `migrate`) swaps the new vectors in. `reembed --cancel` drops them.

In place, after the settings changed (search has no vectors of the model meanwhile):
if EMBEDDING_DIMENSIONS changed, the vector columns (chunks' and notes') are resized: their old
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
from attachments.services import vectors_next
from attachments.services.files import enqueue_reembed
from attachments.services.vectors_next import column_dimensions
from core.embeddings import embedding_model_name, local_runtime
from notes.indexing import note_embed, note_enqueue_embedding, notes_needing_embedding
from notes.models import Note, NoteVector

# (vector table, its HNSW index, the table whose rows record which model they were embedded with)
VECTOR_TABLES = (
    (ChunkVector._meta.db_table, "chunkvector_embedding_hnsw", DocumentChunk._meta.db_table),
    (NoteVector._meta.db_table, "notevector_embedding_hnsw", Note._meta.db_table),
)


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
        background = parser.add_argument_group(
            "in the background, without downtime (the settings still name the current model)"
        )
        background.add_argument(
            "--background",
            action="store_true",
            help="Embed everything with --to-model beside "
            "the live vectors; search keeps the live ones until the switch.",
        )
        background.add_argument(
            "--to-model", help="EMBEDDING_MODEL of the new model ('' for the bundled one)"
        )
        background.add_argument(
            "--to-backend",
            choices=("local", "openai"),
            help="EMBEDDING_BACKEND of the new model (default: as now)",
        )
        background.add_argument(
            "--to-dimensions", type=int, help="its vectors' size (default: EMBEDDING_DIMENSIONS)"
        )
        background.add_argument("--to-base-url", help="its server (default: EMBEDDING_BASE_URL)")
        background.add_argument(
            "--to-runtime",
            choices=("onnx", "onnx-int8", "torch"),
            help="the bundled model's runtime (default: as now)",
        )
        background.add_argument("--status", action="store_true", help="How far it has come.")
        background.add_argument(
            "--switch",
            action="store_true",
            help="Swap the complete build in (the settings must name its model).",
        )
        background.add_argument("--cancel", action="store_true", help="Drop the build.")
        background.add_argument(
            "--retry", action="store_true", help="Queue again what failed (after fixing it)."
        )

    def background(self, options: dict[str, Any]) -> bool:
        """The background re-embedding's options; False when none was given."""
        if options["status"]:
            self.status()
        elif options["cancel"]:
            build = vectors_next.build_cancel()
            self.stdout.write(f"Cancelled: {build}." if build else "No re-embedding is open.")
        elif options["switch"]:
            self.switch()
        elif options["retry"]:
            build = vectors_next.open_build()
            if build is None:
                raise CommandError("No re-embedding is open.")
            self.stdout.write(f"{build.model_name}: {vectors_next.advance(build_id=build.pk)}")
        elif options["background"]:
            if options["to_model"] is None and not options["to_runtime"]:
                raise CommandError("Name the new model: --to-model (and --to-runtime, …).")
            try:
                build = vectors_next.build_start(
                    backend=options["to_backend"] or settings.EMBEDDING_BACKEND,
                    model=settings.EMBEDDING_MODEL
                    if options["to_model"] is None
                    else options["to_model"],
                    dimensions=options["to_dimensions"] or settings.EMBEDDING_DIMENSIONS,
                    base_url=options["to_base_url"] or settings.EMBEDDING_BASE_URL,
                    runtime=options["to_runtime"] or local_runtime(),
                )
            except vectors_next.BuildError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(
                self.style.SUCCESS(
                    f"Re-embedding with {build.model_name} ({build.dimensions} dimensions) in the "
                    "background; search keeps the current vectors. `manage.py reembed --status` "
                    "says how far it is."
                )
            )
        else:
            return False
        return True

    def status(self) -> None:
        found = vectors_next.build_status()
        if found is None:
            self.stdout.write("No re-embedding has been started.")
            return
        build = found.build
        self.stdout.write(f"{build.model_name} ({build.dimensions} dimensions): {build.state}")
        if build.is_open:
            self.stdout.write(
                f"sources: {found.sources - found.sources_missing} of {found.sources}; "
                f"notes: {found.notes - found.notes_missing} of {found.notes}"
            )
        if found.failed:
            self.stdout.write(
                f"{found.failed} job(s) failed; the last: {found.error}\nFix the cause (the "
                "new model's server, its key), then `manage.py reembed --retry`."
            )
        if build.state == build.State.COMPLETE and not found.settings_match:
            self.stdout.write(
                "Complete. Set the EMBEDDING_* settings to this model and restart "
                "(`manage.py serve` switches at start; else run `manage.py reembed --switch`)."
            )

    def switch(self) -> None:
        done = vectors_next.switch()
        messages = {
            "switched": "Switched: search uses the new vectors.",
            "building": "Not yet: sources or notes changed; they are being embedded.",
            "waiting": "Not switched: the settings name another model than the complete "
            "re-embedding's; set the EMBEDDING_* settings to it first.",
            "none": "No complete re-embedding to switch to.",
        }
        self.stdout.write(messages.get(done, done))

    def handle(self, *args: Any, **options: Any) -> None:
        if self.background(options):
            return
        if vectors_next.open_build() is not None:
            raise CommandError(
                "A re-embedding is running in the background (`manage.py reembed --status`); "
                "cancel it first (`--cancel`) or wait for it and switch (`--switch`)."
            )
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
