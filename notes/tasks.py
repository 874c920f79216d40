"""django-q2 entry points: thin, take ids, call one service."""

from __future__ import annotations

from notes import indexing


def embed_note(note_id: int | str) -> None:
    """Compute the vectors of a note's current title and body."""
    indexing.note_embed(note_id=int(note_id))
