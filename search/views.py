"""The search page (global or per notebook) over the user's PDFs and notes."""

from __future__ import annotations

import logging
import re

from django.contrib.auth.decorators import login_required
from django.db import DatabaseError
from django.http import HttpResponse
from django.shortcuts import render
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_http_methods

from attachments import selectors
from attachments.models import NoteAttachment
from notebook.textutil import cjk_ratio
from notebook.types import AuthenticatedHttpRequest
from notes.selectors import note_get, notebook_get, notebook_list, visible_notes
from search.retrieval import MAX_QUERY_CHARS, Scope, search

logger = logging.getLogger(__name__)
MODES = ("hybrid", "lexical", "vector")
SNIPPET_CHARS = 320


_STOP_WORDS = (
    "a an and are as at be but by can do does for from had has have how i if in into is it "
    "its me my no not of on or our so than that the then there these they this to was we what "
    "when where which who why will with you your der die das und ist ein eine zu von mit"
)
_STOP = frozenset(_STOP_WORDS.split())


def _worth_marking(word: str) -> bool:
    return bool(cjk_ratio(word)) or (len(word) >= 2 and word not in _STOP)


def highlight(text: str, query: str, *, width: int = SNIPPET_CHARS) -> SafeString:
    """An escaped snippet of `text` around the first query word, query words in <mark>."""
    words = sorted(
        {w for w in re.findall(r"\w+", query.lower()) if _worth_marking(w)}, key=len, reverse=True
    )
    # Whole words only (CJK has no word boundaries, so its terms match anywhere).
    alternatives = [re.escape(w) if cjk_ratio(w) else rf"\b{re.escape(w)}\w*" for w in words]
    pattern = re.compile("|".join(alternatives), re.IGNORECASE) if words else None
    start = 0
    if pattern and (first := pattern.search(text)):
        start = max(0, first.start() - width // 3)
    window = text[start : start + width]
    prefix = "…" if start else ""
    suffix = "…" if start + width < len(text) else ""
    if not pattern:
        return mark_safe(prefix + escape(window) + suffix)  # noqa: S308 - escaped
    parts: list[str] = []
    last = 0
    for match in pattern.finditer(window):
        parts.append(escape(window[last : match.start()]))
        parts.append(f"<mark>{escape(match.group(0))}</mark>")
        last = match.end()
    parts.append(escape(window[last:]))
    return mark_safe(prefix + "".join(parts) + suffix)  # noqa: S308 - every piece is escaped


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


@login_required
@require_http_methods(["GET"])
def search_page(request: AuthenticatedHttpRequest, notebook_id: int | None = None) -> HttpResponse:
    """Search PDFs and notes, globally or in one notebook, with filters for notebook, note and
    file. A filter naming something the user may not see answers 404, as everywhere."""
    user = request.user
    notebook = notebook_get(user=user, notebook_id=notebook_id) if notebook_id else None
    params = request.GET
    if notebook is None and (chosen := _int(params.get("notebook"))):
        notebook = notebook_get(user=user, notebook_id=chosen)
    note_id = _int(params.get("note"))
    note = note_get(user=user, note_id=note_id, include_trashed=False) if note_id else None
    if note and notebook and note.notebook_id != notebook.pk:
        note = None  # a note of another notebook: the notebook filter wins
    file_id = _int(params.get("file"))
    attachment = selectors.attachment_get(user=user, attachment_id=file_id) if file_id else None
    query = " ".join(params.get("q", "").split())
    mode = params.get("mode", "hybrid")
    mode = mode if mode in MODES else "hybrid"
    include_notes = "q" not in params or params.get("notes") == "on"  # checked by default
    diversity = params.get("diverse") == "on"
    error = ""
    result = None
    if len(query) > MAX_QUERY_CHARS:
        error = f"Keep the question under {MAX_QUERY_CHARS:,} characters."
    elif query:
        try:
            result = search(
                user=user,
                query=query,
                scope=Scope(
                    notebook_id=notebook.pk if notebook else None,
                    note_id=note.pk if note else None,
                    attachment_ids=[attachment.pk] if attachment else None,
                    include_notes=include_notes,
                ),
                limit=20,
                mode=mode,  # type: ignore[arg-type]
                diversity=diversity,
            )
        except DatabaseError:  # the keyword leg failed (a vector failure only degrades)
            logger.exception("search for user %s failed", user.pk)
            error = "Search failed: the database did not answer. Try again in a moment."
    live_notes = visible_notes(user=user).filter(trashed_at__isnull=True)
    if notebook:
        live_notes = live_notes.filter(notebook=notebook)
    processing = NoteAttachment.objects.filter(
        note__in=live_notes, status__in=("pending", "processing")
    )
    hits = [
        {
            "hit": hit,
            "snippet": highlight(hit.text, query),
            "page_anchor": hit.chunk.page_number if hit.chunk else None,
        }
        for hit in (result.hits if result else [])
    ]
    context = {
        "notebook": notebook,
        "fixed_notebook": notebook_id is not None,
        "query": query,
        "mode": mode,
        "modes": MODES,
        "hits": hits,
        "result": result,
        "latency_ms": round(result.total * 1000) if result else None,
        "processing_count": processing.count(),
        "has_sources": live_notes.exists(),
        "error": error,
        "filters": {
            "notebooks": notebook_list(user=user) if notebook_id is None else [],
            "notes": live_notes.order_by("title")[:500],
            "files": selectors.searchable_attachments(
                user=user, notebook_id=notebook.pk if notebook else None
            )[:500],
            "notebook": notebook,
            "note": note,
            "file": attachment,
            "include_notes": include_notes,
            "diversity": diversity,
        },
    }
    return render(request, "search/search.html", context)
