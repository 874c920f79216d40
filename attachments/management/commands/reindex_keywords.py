"""`manage.py reindex_keywords`: build the keyword (BM25) index of every ready file and note
again from its chunks, as ingestion builds it now; after BM25_TITLE_WEIGHT or
BM25_SECTION_WEIGHT changed. Nothing is extracted or embedded; search keeps working while it
runs (each file is rebuilt in one transaction)."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from attachments.services.reindexing import keywords_rebuild


class Command(BaseCommand):
    help = (
        "Build the keyword index of every ready file and note again (after BM25 weights changed)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ids", nargs="*", type=int, metavar="ID", help="Only these files.")

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.perf_counter()
        done = keywords_rebuild(attachment_ids=options["ids"] or None, notes=not options["ids"])
        took = time.perf_counter() - started
        self.stdout.write(f"keyword index rebuilt for {done} files in {took:.1f}s")
