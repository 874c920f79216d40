"""Profiles' document vectors when the embedding model changes: what `manage.py reembed`
(attachments) asks of intelligence through attachments.signals."""

from __future__ import annotations

from typing import Any

from core.embeddings import get_embedder
from intelligence.models import SourceProfile


def profile_vectors_resize(cursor: Any, dimensions: int) -> None:
    """Profiles keep their rows (type, name, data): only their document vectors go."""
    table = SourceProfile._meta.db_table
    cursor.execute("DROP INDEX IF EXISTS sourceprofile_embedding_hnsw")
    cursor.execute(f"UPDATE {table} SET embedding = NULL, embedding_model = ''")  # noqa: S608
    cursor.execute(f"ALTER TABLE {table} ALTER COLUMN embedding TYPE vector({int(dimensions)})")
    cursor.execute(
        f"CREATE INDEX sourceprofile_embedding_hnsw ON {table} USING hnsw "
        "(embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"
    )


def profiles_reembed(*, model: str, everything: bool = False) -> int:
    """Embed the stored canonical text of profiles lacking a vector from `model` (every
    profile's with `everything`): one short text per source, done here, not queued."""

    if everything:
        SourceProfile.objects.update(embedding_model="")
    stale = list(
        SourceProfile.objects.exclude(embedding_model=model)
        .exclude(canonical_text="")
        .only("pk", "canonical_text")
    )
    embedder = get_embedder()
    for start in range(0, len(stale), 64):
        batch = stale[start : start + 64]
        vectors = embedder.embed([p.canonical_text for p in batch])
        for profile, vector in zip(batch, vectors, strict=True):
            SourceProfile.objects.filter(pk=profile.pk).update(
                embedding=vector, embedding_model=model
            )
    return len(stale)
