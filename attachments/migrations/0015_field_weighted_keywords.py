"""Files and notes keyword-indexed again with fields (BM25F): a chunk's tsvector now holds
its file's title (weight A) and its section headings (B) beside its text, and the posting
lists count each word by its field (attachments.services.reindexing.keywords_rebuild)."""

from django.db import migrations


def rebuild(apps, schema_editor):  # type: ignore[no-untyped-def]
    # Today's indexing code: the one the pipeline runs (as 0012 does).
    from attachments.services.reindexing import keywords_rebuild

    keywords_rebuild()


class Migration(migrations.Migration):
    dependencies = [
        ("attachments", "0014_other_sources"),
        ("notes", "0004_note_from_file"),
    ]

    operations = [migrations.RunPython(rebuild, migrations.RunPython.noop)]
