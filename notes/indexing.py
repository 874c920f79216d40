"""Making notes searchable beside document chunks: a tsvector (BM25) rebuilt with every save,
and vectors computed in the background (django-q2), one per window of title + body."""

from __future__ import annotations

import logging

from django.db import connection, transaction

from core.embeddings import embedding_model_name, get_embedder
from core.jobs import job_submit
from core.language import (
    detect_language,
    fields_params,
    fields_tsvector_sql,
    search_config_for,
    segment_for_search,
    word_count_sql,
)
from notes.models import Note, NoteVector

logger = logging.getLogger(__name__)


def note_search_text(title: str, body: str) -> str:
    return f"{title}\n{body}".strip()


def note_index_text(*, note_id: int) -> None:
    """Rebuild the note's tsvector and BM25 length from its current title and body, in the
    text search configuration of its language (Chinese cut into words first): the title is a
    title field (core.language.fields_tsvector_sql), the body its text."""
    row = Note.objects.filter(pk=note_id).values_list("title", "body").first()
    if row is None:
        return
    title, body = row
    language = detect_language(note_search_text(title, body))
    config = search_config_for(language)
    expr = fields_tsvector_sql(config, "%s", "''", "%s")
    params = fields_params(
        config, segment_for_search(title, language), None, segment_for_search(body, language)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Note._meta.db_table} "  # noqa: S608 - table and SQL are ours
            f"SET search_config = %s, search_vector = {expr} WHERE id = %s",
            [config, *params, note_id],
        )
        cursor.execute(
            f"UPDATE {Note._meta.db_table} SET token_len = {word_count_sql()} WHERE id = %s",  # noqa: S608
            [note_id],
        )


def note_enqueue_embedding(*, note_id: int) -> None:
    """Embed the note in the background, as its author's job (core.jobs: fair per user),
    queued once the surrounding transaction commits. A run that fails is tried again: a note
    has no reaper of its own."""
    author_id = Note.objects.filter(pk=note_id).values_list("author_id", flat=True).first()
    job_submit(
        "notes.tasks.embed_note", note_id, user_id=author_id, group="embed-note", max_attempts=3
    )


def note_embed(*, note_id: int) -> bool:
    """Embed the note's title + body as it is now; returns whether vectors were written.

    The text is read, embedded outside any transaction, and written only if the note did not
    change meanwhile (a later edit queued its own run, which will write the newer text)."""
    row = Note.objects.filter(pk=note_id).values_list("title", "body", "updated_at").first()
    if row is None:
        return False
    title, body, updated_at = row
    text = note_search_text(title, body)
    embedder = get_embedder()
    windows = embedder.windows(text) if text else []
    vectors = embedder.embed(windows) if windows else []
    with transaction.atomic():
        current = Note.objects.select_for_update().filter(pk=note_id).first()
        if current is None or current.updated_at != updated_at:
            logger.info("note %s changed while it was embedded; its newer run will write", note_id)
            return False
        NoteVector.objects.filter(note_id=note_id).delete()
        NoteVector.objects.bulk_create(
            NoteVector(note_id=note_id, window=n, embedding=v) for n, v in enumerate(vectors)
        )
        Note.objects.filter(pk=note_id).update(embedding_model=embedder.model_name)
    return True


def notes_needing_embedding() -> list[int]:
    """Notes without vectors from the configured model (after a model change, or a lost task)."""
    return list(
        Note.objects.exclude(embedding_model=embedding_model_name()).values_list("pk", flat=True)
    )
