"""`manage.py compiletranslations`: locale/*/LC_MESSAGES/*.po → .mo with polib (no GNU
gettext needed). `--check` compiles to memory and fails if a committed .mo differs from its
.po or a catalogue has untranslated or fuzzy entries (tests/test_translations.py runs it)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import polib
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


def catalogues() -> list[Path]:
    return sorted(
        p for root in settings.LOCALE_PATHS for p in Path(root).glob("*/LC_MESSAGES/*.po")
    )


def compiled(po_path: Path) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.mo"
        polib.pofile(str(po_path)).save_as_mofile(str(out))
        return out.read_bytes()


def problems(po_path: Path) -> list[str]:
    po = polib.pofile(str(po_path))
    found = [f"{po_path}: untranslated: {e.msgid!r}" for e in po.untranslated_entries()]
    found += [f"{po_path}: fuzzy: {e.msgid!r}" for e in po.fuzzy_entries()]
    mo_path = po_path.with_suffix(".mo")
    if not mo_path.exists() or mo_path.read_bytes() != compiled(po_path):
        found.append(f"{mo_path}: out of date; run manage.py compiletranslations")
    return found


class Command(BaseCommand):
    help = "Compile the translation catalogues (.po → .mo) with polib; --check only checks."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--check", action="store_true", help="fail on stale or incomplete catalogues"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        paths = catalogues()
        if options["check"]:
            found = [line for path in paths for line in problems(path)]
            if found:
                raise CommandError("\n".join(found))
            self.stdout.write(f"{len(paths)} catalogues complete and compiled.")
            return
        for path in paths:
            path.with_suffix(".mo").write_bytes(compiled(path))
            self.stdout.write(f"compiled {path}")
