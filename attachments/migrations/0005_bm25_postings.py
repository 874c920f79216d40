"""What BM25 reads per file (chunk count, total length, and a posting list per lexeme), so a
query reads those instead of every candidate's tsvector; filled here for the files indexed."""

import django.contrib.postgres.fields
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
            name="PostingList",
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
                    "chunk_ids",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(), size=None
                    ),
                ),
                (
                    "tfs",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.SmallIntegerField(), size=None
                    ),
                ),
                (
                    "lens",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.IntegerField(), size=None
                    ),
                ),
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
            INSERT INTO attachments_postinglist (attachment_id, lexeme, df, chunk_ids, tfs, lens)
            SELECT c.attachment_id, u.lexeme, count(*), array_agg(c.id ORDER BY c.id),
                   array_agg(coalesce(array_length(u.positions, 1), 1) ORDER BY c.id),
                   array_agg(c.token_len ORDER BY c.id)
            FROM attachments_documentchunk c, unnest(c.search_vector) AS u
            WHERE c.search_vector IS NOT NULL
            GROUP BY c.attachment_id, u.lexeme;
            """,
            migrations.RunSQL.noop,
        ),
    ]
