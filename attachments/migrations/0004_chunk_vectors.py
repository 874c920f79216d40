"""Chunk embeddings move to ChunkVector: one row per window, so a chunk longer than the
embedding model's input is no longer cut off at its first ~256 tokens.

Existing vectors are kept as window 0 (vector search keeps working) and their chunks are
marked not embedded, so `manage.py reembed` fills in the missing windows."""

import django.db.models.deletion
import pgvector.django.indexes
import pgvector.django.vector
from django.conf import settings
from django.db import migrations, models

COPY = """
INSERT INTO attachments_chunkvector (chunk_id, attachment_id, "window", embedding)
SELECT id, attachment_id, 0, embedding FROM attachments_documentchunk
WHERE embedding IS NOT NULL;
UPDATE attachments_documentchunk SET embedding_model = '';
"""


class Migration(migrations.Migration):
    dependencies = [
        ("attachments", "0003_chunk_token_len"),
    ]

    operations = [
        migrations.CreateModel(
            name="ChunkVector",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("window", models.PositiveSmallIntegerField(default=0)),
                (
                    "embedding",
                    pgvector.django.vector.VectorField(dimensions=settings.EMBEDDING_DIMENSIONS),
                ),
                (
                    "attachment",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="attachments.noteattachment",
                    ),
                ),
                (
                    "chunk",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="vectors",
                        to="attachments.documentchunk",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["attachment"], name="chunkvector_attachment"),
                    pgvector.django.indexes.HnswIndex(
                        ef_construction=64,
                        fields=["embedding"],
                        m=16,
                        name="chunkvector_embedding_hnsw",
                        opclasses=["vector_cosine_ops"],
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("chunk", "window"), name="chunkvector_unique_window"
                    ),
                ],
            },
        ),
        migrations.RunSQL(COPY, migrations.RunSQL.noop),
        migrations.RemoveIndex(model_name="documentchunk", name="chunk_embedding_hnsw"),
        migrations.RemoveField(model_name="documentchunk", name="embedding"),
    ]
