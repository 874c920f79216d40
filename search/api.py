"""/api/search: passages from everything the user may see; filters name objects read through
their selectors with request.user (404 otherwise)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from ninja import Query, Router

from attachments import selectors
from core.ratelimit import rate_limit, user_key
from core.types import AuthenticatedHttpRequest
from notes.selectors import note_get, notebook_get
from search.any_language import search_any_language
from search.retrieval import MAX_QUERY_CHARS, Hit, Scope
from search.schemas import DocumentHitOut, SearchHitOut, SearchIn, SearchOut
from search.snippets import heading_text, plain_snippet, readable_text

router = Router(tags=["search"])


def _search(request: AuthenticatedHttpRequest, params: SearchIn) -> SearchOut:
    query = " ".join(params.q.split())
    if not query:
        raise ValidationError({"q": "Type something to search for."})
    if len(query) > MAX_QUERY_CHARS:
        raise ValidationError({"q": f"Keep the query under {MAX_QUERY_CHARS:,} characters."})
    # Filters name objects: each must be the user's own (404 otherwise), like every other route.
    if params.notebook_id is not None:
        notebook_get(user=request.user, notebook_id=params.notebook_id)
    if params.note_id is not None:
        note_get(user=request.user, note_id=params.note_id)
    for attachment_id in params.attachment_ids or []:
        selectors.attachment_get(user=request.user, attachment_id=attachment_id)
    # Beyond SEARCH_RATE_LIMIT: RateLimited, a 429 with Retry-After (notebook.api).
    rate_limit(scope="search", key=user_key(request.user))
    scope = Scope(
        params.notebook_id,
        params.note_id,
        params.attachment_ids,
        params.include_notes,
        doc_type=params.doc_type,
    )
    options = {} if params.mode == "documents" else {
        "fusion": params.fusion, "diversity": params.diversity}  # fmt: skip
    result = search_any_language(
        user=request.user,
        query=query,
        scope=scope,
        limit=params.limit,
        mode=params.mode,
        rerank=params.rerank,
        expand_query=params.expand,
        **options,
    )
    hits = [_hit_out(hit, query) for hit in result.hits]
    documents = [_document_out(document, query) for document in result.documents]
    timings = {stage: round(seconds * 1000, 2) for stage, seconds in result.timings.items()}
    timings["total"] = round(result.total * 1000, 2)
    return SearchOut(
        query=query,
        mode=params.mode,
        hits=hits,
        documents=documents,
        timings_ms=timings,
        info=result.info,
        warming_up=bool(result.info.get("warming_up")),
    )


def _hit_out(hit: Hit, query: str) -> SearchHitOut:
    note, chunk = hit.note, hit.chunk
    scores: dict[str, Any] = {
        "fused": hit.fused,
        "lexical": hit.lexical,
        "lexical_rank": hit.lexical_rank,
        "vector": hit.vector,
        "vector_rank": hit.vector_rank,
        "rerank": hit.rerank,
    }
    where: dict[str, Any] = {
        "note_id": note.pk,
        "note_title": note.title,
        "notebook_id": note.notebook_id,
        "snippet": plain_snippet(readable_text(hit), query),
        "heading": heading_text(hit),
    }
    if chunk is None:
        return SearchHitOut(kind="note", content=hit.text, **where, **scores)
    return SearchHitOut(
        kind="pdf",
        chunk_id=chunk.pk,
        attachment_id=chunk.attachment_id,
        file=chunk.attachment.original_name,
        page=chunk.page_number,
        heading_path=chunk.heading_path,
        start_char=chunk.start_char,
        end_char=chunk.end_char,
        content=chunk.content,
        **where,
        **scores,
    )


def _document_out(document: Any, query: str) -> DocumentHitOut:
    # Nothing of a profile whose type was not recognised (SourceProfile.recognised) goes out.
    attachment, profile, passage = document.attachment, document.recognised, document.passage
    return DocumentHitOut(
        attachment_id=attachment.pk,
        note_id=attachment.note_id,
        note_title=attachment.note.title,
        notebook_id=attachment.note.notebook_id,
        file=attachment.original_name,
        display_name=document.display_name,
        suggested_name=document.suggested_name,
        better_name=profile.better_name if profile else "",
        doc_type=document.doc_type,
        extracted=profile.extracted if profile else {},
        fused=document.fused,
        similarity=document.similarity,
        passage_rank=document.passage_rank,
        rerank=document.rerank,
        page=passage.chunk.page_number if passage and passage.chunk else None,
        snippet=plain_snippet(readable_text(passage), query) if passage else "",
    )


@router.get("/search", response=SearchOut)
def search_get(request: AuthenticatedHttpRequest, params: Query[SearchIn]) -> SearchOut:
    """Passages from your PDFs and notes, best first, each with a readable `snippet` and its
    `heading`, every score (BM25, cosine, fused) and per-stage timings. Filters (`notebook_id`,
    `note_id`, `attachment_ids`) narrow the scope. Right after the server starts, `warming_up`
    says the results are keyword-only while the embedding model loads. Beyond
    SEARCH_RATE_LIMIT searches (GET and POST together): 429 with `Retry-After`."""
    return _search(request, params)


@router.post("/search", response=SearchOut)
def search_post(request: AuthenticatedHttpRequest, payload: SearchIn) -> SearchOut:
    """The same as GET, with the options in a JSON body (for long queries)."""
    return _search(request, payload)
