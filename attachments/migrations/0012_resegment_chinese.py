"""Chinese files and notes keyword-indexed again: segment_for_search now leaves everything
between runs of Chinese characters to PostgreSQL's parser (Latin words with accents stay
whole), so the stored tsvectors must be cut the way queries now are."""

from django.db import migrations


def resegment(apps, schema_editor):  # type: ignore[no-untyped-def]
    # Today's models and indexing code: index_text is the one the pipeline runs.
    from attachments.models import NoteAttachment
    from attachments.services.ingestion import index_text
    from core.language import SEGMENTED
    from notes.indexing import note_index_text

    chinese = NoteAttachment.objects.filter(language__in=SEGMENTED)
    for attachment in chinese.only("pk", "language", "search_config"):
        index_text(attachment, attachment.language, attachment.search_config)
    notes = apps.get_model("notes", "Note").objects.filter(search_config="simple")
    for pk in notes.values_list("pk", flat=True):
        note_index_text(note_id=pk)  # only text that is mostly Chinese is segmented


class Migration(migrations.Migration):
    dependencies = [
        ("attachments", "0011_sentence_vectors"),
        ("notes", "0002_note_search"),
    ]

    operations = [migrations.RunPython(resegment, migrations.RunPython.noop)]
