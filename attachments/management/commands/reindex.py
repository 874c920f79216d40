"""`manage.py reindex`: after chunking changed, chunk every ready attachment again from its stored
pages, then embed the chunks that changed.

Nothing is extracted or OCR'd again and page texts stay as they are (citations keep matching),
except for pdfminer's glyph codes of unmapped characters ("(cid:13)"), which are dropped from
pages stored before extraction dropped them (issue 31): `reindex` finds and fixes those files.
Pages stored before line styles were kept get them from the PDF once; an encrypted PDF whose
unlocked copy is gone is re-chunked without them (headings by numbering and names alone).
Re-running changes nothing: a file whose chunks come out the same keeps them and their vectors.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from attachments import services
from attachments.models import DocumentChunk, NoteAttachment
from attachments.services.files import enqueue_reembed
from core.embeddings import embedding_model_name


class Command(BaseCommand):
    help = (
        "Chunk ready attachments again from their stored pages (running heads and footers, "
        "headings) and embed the chunks that changed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "ids", nargs="*", type=int, metavar="ID", help="Only these attachments."
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Report what would change; write nothing."
        )
        parser.add_argument(
            "--queue",
            action="store_true",
            help="Queue the embedding for the workers instead of embedding here.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ready = NoteAttachment.objects.filter(status=NoteAttachment.Status.READY)
        if options["ids"]:
            ready = ready.filter(pk__in=options["ids"])
        changed = unchanged = 0
        model = embedding_model_name()
        for pk, name in ready.order_by("pk").values_list("pk", "original_name"):
            result = services.attachment_rechunk(attachment_id=pk, dry_run=options["dry_run"])
            if result is None:
                self.stdout.write(f"{name} (#{pk}): no longer ready, skipped")
                continue
            verb = "would change" if options["dry_run"] else "changed"
            state = verb if result.changed else "unchanged"
            self.stdout.write(
                f"{name} (#{pk}): {state}, {result.chunks} chunks, {result.running_lines} "
                f"running heads/footers, {result.styled_pages} pages with line styles"
                + (
                    f", glyph codes dropped on {result.cleaned_pages} pages"
                    if result.cleaned_pages
                    else ""
                )
            )
            changed += result.changed
            unchanged += not result.changed
            stale = DocumentChunk.objects.filter(attachment_id=pk).exclude(embedding_model=model)
            if options["dry_run"] or not stale.exists():
                continue
            if options["queue"]:
                enqueue_reembed(pk, group="reindex")
            else:
                services.attachment_reembed(attachment_id=pk)
        summary = f"{changed} attachment(s) {'to re-chunk' if options['dry_run'] else 're-chunked'}"
        self.stdout.write(self.style.SUCCESS(f"{summary}, {unchanged} unchanged."))
