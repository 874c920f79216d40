from django.db import migrations, models


class Migration(migrations.Migration):
    """BM25 needs each chunk's length in indexed words; backfill it from the tsvector."""

    dependencies = [
        ("attachments", "0002_reaper_schedule"),
    ]

    operations = [
        migrations.AddField(
            model_name="documentchunk",
            name="token_len",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunSQL(
            "UPDATE attachments_documentchunk SET token_len = (SELECT coalesce(sum(coalesce("
            "array_length(u.positions, 1), 1)), 0) FROM unnest(search_vector) AS u) "
            "WHERE search_vector IS NOT NULL",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
