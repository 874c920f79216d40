"""BM25 statistics per file (chunk count, total length, per-lexeme document frequency), so a
query reads them instead of counting chunks; filled here for the files already indexed."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("attachments", "0004_chunk_vectors"),
    ]

    operations = [
        migrations.AddField(
            model_name="noteattachment",
            name="chunk_count",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="noteattachment",
            name="token_total",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.CreateModel(
            name="AttachmentLexeme",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "lexeme",
                        "attachment",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("lexeme", models.TextField()),
                ("df", models.PositiveIntegerField()),
                (
                    "attachment",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="attachments.noteattachment",
                    ),
                ),
            ],
        ),
        migrations.RunSQL(
            """
            UPDATE attachments_noteattachment a SET chunk_count = s.n, token_total = s.total
            FROM (
                SELECT attachment_id, count(*) AS n, coalesce(sum(token_len), 0) AS total
                FROM attachments_documentchunk GROUP BY attachment_id
            ) s WHERE a.id = s.attachment_id;
            INSERT INTO attachments_attachmentlexeme (attachment_id, lexeme, df)
            SELECT a.id, s.word, s.ndoc FROM attachments_noteattachment a, LATERAL ts_stat(
                format('SELECT search_vector FROM attachments_documentchunk '
                       'WHERE attachment_id = %s', a.id)
            ) AS s;
            """,
            migrations.RunSQL.noop,
        ),
    ]
