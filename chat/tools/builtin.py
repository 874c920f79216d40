"""The built-in tools: document_search, note_search, note_read."""

from __future__ import annotations

from itertools import zip_longest
from typing import Any

from django.http import Http404
from pydantic import BaseModel, Field, field_validator

from attachments.models import DocumentChunk
from attachments.selectors import searchable_attachments
from chat.modes import spec
from chat.tools import AnswerRequest, Tool, ToolResult, register
from core.textutil import unhyphenated
from notes.selectors import note_get
from search.retrieval import Hit, Scope, SearchResult, search

PASSAGE_CHARS = 1500
NOTE_CHARS = 6000


def _quote_attr(value: str) -> str:
    return value.replace('"', "'").replace("<", "(").replace(">", ")")[:200]


def _source(hit: Hit) -> dict[str, object]:
    note = hit.note
    if hit.chunk is None:
        return {"kind": "note", "id": note.pk, "note_id": note.pk, "note_title": note.title,
                "text": hit.text, "score": hit.fused}  # fmt: skip
    chunk = hit.chunk
    return {
        "kind": "document",
        "id": chunk.pk,
        "chunk_id": chunk.pk,
        "attachment_id": chunk.attachment_id,
        "file": chunk.attachment.original_name,
        "page": chunk.page_number,
        # A non-PDF source's unit ("Slide 3", "12:34", a section): how a citation names it.
        "where": str((chunk.metadata or {}).get("unit", "")),
        "heading": " › ".join(chunk.heading_path),
        "language": chunk.attachment.language,
        "note_id": note.pk,
        "note_title": note.title,
        "text": chunk.content,
        "score": hit.fused,
        "lexical": hit.lexical,
        "vector": hit.vector,
    }


def format_sources(context: AnswerRequest, hits: list[Hit]) -> tuple[str, list[dict[str, object]]]:
    """Passages as the model reads them: numbered, with where they come from, fenced as
    untrusted source material (instructions inside them are data, not orders)."""
    parts, passages = [], []
    for hit in hits:
        source = _source(hit)
        n = context.add_source(source)
        source["n"] = n
        passages.append(source)
        place = (
            f'at="{_quote_attr(str(source["where"]))}"'
            if source.get("where")
            else f'page="{source.get("page")}"'
        )
        where = (
            f'file="{_quote_attr(str(source["file"]))}" {place}'
            if hit.chunk
            else f'note="{_quote_attr(hit.note.title)}" note_id="{hit.note.pk}"'
        )
        # Words the layout cut at line ends whole, so that the model reads and quotes them
        # whole ("commands"; verify finds either form in the page).
        text = unhyphenated(str(source["text"]))[:PASSAGE_CHARS]
        parts.append(f'<source id="{n}" {where}>\n{text}\n</source>')
    return "\n".join(parts), passages


def _note_in_context(context: AnswerRequest, note_id: int) -> bool:
    try:
        note = note_get(user=context.user, note_id=note_id, include_trashed=False)
    except Http404:
        return False
    if context.selection is not None:
        return note.pk in context.selection.notes
    if context.note is not None:
        return note.pk == context.note.pk
    return note.notebook_id == context.notebook.pk


MAX_LIMIT = 10  # as many as the exploring mode's 8 passages, and a little more


class NoteDocumentSearchArgs(BaseModel):
    """document_search in a chat about one note: its PDFs only, nothing to choose."""

    query: str = Field(description="What to look for, in the words the documents would use.")
    limit: int = Field(5, description=f"How many passages, 1 to {MAX_LIMIT}.")

    @field_validator("limit", mode="before")
    @classmethod
    def _clamp(cls, value: object) -> int:
        """A limit out of range (or junk) is brought into range, not refused."""
        try:
            number = int(float(str(value)))
        except ValueError:
            return 5
        return min(max(number, 1), MAX_LIMIT)


class DocumentSearchArgs(NoteDocumentSearchArgs):
    note_id: int | None = Field(None, description="Only this note's PDFs.")


def document_search(context: AnswerRequest, args: NoteDocumentSearchArgs) -> ToolResult:
    summary = f"Searching documents for ‘{args.query[:80]}’"
    wanted = args.note_id if isinstance(args, DocumentSearchArgs) else None
    # With chosen sources, search intersects them with the note (still filtered by user).
    if wanted is not None and context.selection is None and not _note_in_context(context, wanted):
        return ToolResult(f"No note {wanted} in this notebook.", summary)
    scope = context.scope(notes=False)
    if wanted is not None:
        scope.note_id = wanted
    result = search(
        user=context.user,
        query=args.query,
        scope=scope,
        limit=args.limit * 3 if spec(context.mode).diversity else args.limit,
        anchors=list(context.anchors),
        anchor_pages=list(context.anchor_pages),
        **_conversation(context, args.query),
    )
    _note_warming_up(context, result)
    if not result.hits and context.selection is not None and context.selection.explicit:
        result.hits = opening_passages(context, scope, args.limit)
    if not result.hits:
        return ToolResult("No passages matched.", summary)
    hits = spread(result.hits, args.limit) if spec(context.mode).diversity else result.hits
    content, passages = format_sources(context, hits)
    return ToolResult(content, summary, passages)


def _conversation(context: AnswerRequest, query: str) -> dict[str, Any]:
    """The conversation's context for a search of the question itself (offline, a follow-up is
    searched as asked, with the turn before as its context); a query of the model's own
    stands alone."""
    if query != context.search_query or context.context_vector is None:
        return {}
    return {"context_vector": list(context.context_vector), "context_text": context.context_text}


def opening_passages(context: AnswerRequest, scope: Scope, limit: int) -> list[Hit]:
    """When search finds nothing in the sources the user chose, their opening passages (each
    chosen PDF's first chunks, in turn) stand in: the answer still uses what was chosen."""

    files = searchable_attachments(user=context.user).filter(pk__in=scope.attachment_ids or [])
    if scope.note_id is not None:
        files = files.filter(note_id=scope.note_id)
    chunks = list(
        DocumentChunk.objects.filter(attachment__in=files)
        .select_related("attachment__note")
        .order_by("attachment_id", "page_number", "index")[: limit * 4]
    )
    per_file: dict[int, list[DocumentChunk]] = {}
    for chunk in chunks:
        per_file.setdefault(chunk.attachment_id, []).append(chunk)
    ordered = [c for group in zip_longest(*per_file.values()) for c in group if c is not None]
    return [Hit(kind="document", note=c.attachment.note, chunk=c) for c in ordered[:limit]]


WARMING_UP_NOTICE = (
    "The search model was still loading (the server has just started): the sources were "
    "found by their words only. Ask again in a few seconds for meaning-based results too."
)


def _note_warming_up(context: AnswerRequest, result: SearchResult) -> None:
    """A search that went keyword-only because the model is loading says so on the answer."""
    if result.info.get("warming_up") and WARMING_UP_NOTICE not in context.notices:
        context.notices.append(WARMING_UP_NOTICE)


SPREAD = 2  # exploring: passages of other documents when the best all come from one


def spread(hits: list[Hit], limit: int) -> list[Hit]:
    """The best `limit` hits; when they all come from one document, the last SPREAD places go
    to the best passages of other documents (exploring spreads over the sources without
    pushing the best document's passages far down)."""
    head = hits[:limit]
    sources = {hit.source for hit in head}
    if len(sources) > 1:
        return head
    others: list[Hit] = []
    for hit in hits[limit:]:
        if hit.source not in sources and len(others) < SPREAD:
            others.append(hit)
            sources.add(hit.source)
    return head[: limit - len(others)] + others if limit > SPREAD else head


class NoteSearchArgs(BaseModel):
    query: str = Field(description="Words to look for in the notebook's notes.")


def note_search(context: AnswerRequest, args: NoteSearchArgs) -> ToolResult:
    summary = f"Searching notes for ‘{args.query[:80]}’"
    result = search(
        user=context.user,
        query=args.query,
        scope=context.scope(documents=False),
        limit=5,
        **_conversation(context, args.query),
    )
    _note_warming_up(context, result)
    if not result.hits:
        return ToolResult("No notes matched.", summary)
    content, passages = format_sources(context, result.hits)
    return ToolResult(content, summary, passages)


class NoteReadArgs(BaseModel):
    note_id: int = Field(description="The id of a note of this notebook.")


def note_read(context: AnswerRequest, args: NoteReadArgs) -> ToolResult:
    if not _note_in_context(context, args.note_id):
        return ToolResult(f"No note {args.note_id} in this notebook.", "Reading a note")
    note = note_get(user=context.user, note_id=args.note_id, include_trashed=False)
    source = {"kind": "note", "id": note.pk, "note_id": note.pk, "note_title": note.title,
              "text": f"{note.title}\n{note.body}", "score": None}  # fmt: skip
    n = context.add_source(source)
    source["n"] = n
    body = note.body[:NOTE_CHARS]
    content = (
        f'<source id="{n}" note="{_quote_attr(note.title)}" note_id="{note.pk}">\n'
        f"{note.title}\n{body}\n</source>"
    )
    return ToolResult(content, f"Reading note ‘{note.title[:80]}’", [source])


register(Tool(
    "document_search",
    "Search the PDFs of this notebook (or of one note) for passages relevant to a query. "
    "Returns numbered passages with file and page; cite them as [n].",
    DocumentSearchArgs,
    document_search,
    scoped_args=lambda context: NoteDocumentSearchArgs if context.note else DocumentSearchArgs,
))  # fmt: skip
register(Tool(
    "note_search",
    "Search the notes of this notebook by keywords and meaning. Returns numbered notes.",
    NoteSearchArgs,
    note_search,
    available=lambda context: context.notes_in_scope,
))  # fmt: skip
register(Tool(
    "note_read",
    "Read one whole note of this notebook by its id.",
    NoteReadArgs,
    note_read,
    available=lambda context: context.notes_in_scope,
))  # fmt: skip
