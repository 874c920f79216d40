"""Schemas of /api/search."""

from __future__ import annotations

from typing import Any, Literal

from ninja import Field, Schema

from core.params import Id

DocTypeIn = Literal["invoice", "receipt", "flight_ticket", "order_confirmation", "other"]


class SearchIn(Schema):
    q: str
    mode: Literal["hybrid", "lexical", "vector", "documents"] = Field(
        "hybrid", description="Passages (hybrid, lexical, vector) or `documents`: one per source."
    )
    limit: int = Field(10, ge=1, le=50)
    notebook_id: Id | None = None
    note_id: Id | None = None
    attachment_ids: list[Id] | None = None
    include_notes: bool = Field(True, description="Search notes beside PDF passages.")
    fusion: Literal["rrf", "minmax"] | None = Field(None, description="Default: SEARCH_FUSION.")
    diversity: bool = Field(False, description="Round-robin across documents.")
    rerank: bool | None = Field(
        None,
        description="Default: passages, on when a RERANKER is configured; documents, on when "
        "a CHAT_MODEL is (one relevance call per candidate, RERANK_CONCURRENCY at a time).",
    )
    doc_type: DocTypeIn | None = Field(
        None,
        description="Only documents of this type (notes have none); wins over the type the "
        "chat model infers from the query.",
    )
    expand: bool = Field(
        True,
        description="With a chat model, also search the query's English translation and "
        "expansion (`info.expansion`); offline the query is searched as written.",
    )


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


class DocumentHitOut(Schema):
    attachment_id: int
    note_id: int
    note_title: str
    notebook_id: int
    file: str = Field(description="The original file name.")
    display_name: str = Field(
        description="the user's file name, or the suggested one once they accepted it"
    )
    suggested_name: str = Field(
        description="{DocType}-{yyyyMMdd}-{slug}-{shortId}.{ext} when the type was recognised "
        "with confidence, else empty"
    )
    better_name: str
    doc_type: str = Field(description="invoice, receipt, flight_ticket, order_confirmation, other")
    extracted: dict[str, Any]
    fused: float
    similarity: float | None = Field(description="Cosine of the query and the document vector.")
    passage_rank: int | None
    rerank: float | None = Field(description="The chat model's relevancy, 0..1.")
    page: int | None = Field(description="The page of the best passage.")
    snippet: str


class SearchOut(Schema):
    query: str
    mode: str
    hits: list[SearchHitOut]
    documents: list[DocumentHitOut] = Field(
        [], description="`mode=documents`: one hit per source (`hits` is then empty)."
    )
    timings_ms: dict[str, float]
    info: dict[str, Any] = Field(
        description="How the ranking was made: query language, fusion and weights, reranker "
        "backend and whether it fell back to the fused order; `degraded` when the vector leg "
        "was left out, and why; `expansion` (language, englishQuery, expandedEnglishQuery, "
        "docType, fallback), `doc_type` (value and source: user or inferred) and `stages` "
        "(expansion, search, rerank in seconds)."
    )
    warming_up: bool = Field(
        False,
        description="The server has just started and is still loading the embedding model: "
        "these results come from the keyword (BM25) leg only; the vector leg joins in seconds.",
    )
