from __future__ import annotations

from django.db import migrations
from pgvector.django import VectorExtension


class Migration(migrations.Migration):
    """Enable pgvector (and unaccent for text search) before any app creates vector columns."""

    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [
        VectorExtension(),
        migrations.RunSQL(
            "CREATE EXTENSION IF NOT EXISTS unaccent", reverse_sql=migrations.RunSQL.noop
        ),
    ]
