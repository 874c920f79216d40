"""Schemas of /api/search."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Field, Schema


class SearchIn(Schema):
    q: str
    mode: Literal["hybrid", "lexical", "vector"] = "hybrid"
    limit: int = Field(10, ge=1, le=50)
    notebook_id: int | None = None
    note_id: int | None = None
    attachment_ids: list[int] | None = None
    include_notes: bool = Field(True, description="Search notes beside PDF passages.")
    fusion: Literal["rrf", "minmax"] | None = Field(None, description="Default: SEARCH_FUSION.")
    diversity: bool = Field(False, description="Round-robin across documents.")
    rerank: bool | None = Field(None, description="Default: on when a RERANKER is configured.")


class SearchHitOut(Schema):
    kind: Literal["pdf", "note"]
    note_id: int
    note_title: str
    notebook_id: int
    # PDF passages only (null for notes):
    chunk_id: int | None = None
    attachment_id: int | None = None
    file: str | None = None
    page: int | None = None
    heading_path: list[str] = []
    start_char: int | None = None
    end_char: int | None = None
    content: str
    snippet: str = Field(
        description="About 320 characters around the first query word, as plain text (a "
        "note's Markdown removed), with … where text was cut."
    )
    heading: str = Field("", description="The heading path joined with ' › ' (PDFs).")
    fused: float
    lexical: float | None
    lexical_rank: int | None
    vector: float | None
    vector_rank: int | None
    rerank: float | None


class SearchOut(Schema):
    query: str
    mode: str
    hits: list[SearchHitOut]
    timings_ms: dict[str, float]
    info: dict[str, Any] = Field(
        description="How the ranking was made: query language, fusion and weights, reranker "
        "backend and whether it fell back to the fused order; `degraded` when the vector leg "
        "was left out, and why."
    )
    warming_up: bool = Field(
        False,
        description="The server has just started and is still loading the embedding model: "
        "these results come from the keyword (BM25) leg only; the vector leg joins in seconds.",
    )
