"""The search page (global or per notebook) over the user's PDFs."""

from __future__ import annotations

import re

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_http_methods

from attachments.models import NoteAttachment
from attachments.retrieval import MAX_QUERY_CHARS, Scope, search
from notebook.textutil import cjk_ratio
from notebook.types import AuthenticatedHttpRequest
from notes.selectors import notebook_get, notebook_list

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


@login_required
@require_http_methods(["GET"])
def search_page(request: AuthenticatedHttpRequest, notebook_id: int | None = None) -> HttpResponse:
    notebook = notebook_get(user=request.user, notebook_id=notebook_id) if notebook_id else None
    query = " ".join(request.GET.get("q", "").split())
    mode = request.GET.get("mode", "hybrid")
    mode = mode if mode in MODES else "hybrid"
    error = ""
    result = None
    if len(query) > MAX_QUERY_CHARS:
        error = f"Keep the question under {MAX_QUERY_CHARS:,} characters."
    elif query:
        result = search(
            user=request.user,
            query=query,
            scope=Scope(notebook_id=notebook.pk if notebook else None),
            limit=20,
            mode=mode,  # type: ignore[arg-type]
        )
    processing = NoteAttachment.objects.filter(
        note__notebook__in=notebook_list(user=request.user),
        status__in=("pending", "processing"),
    )
    if notebook:
        processing = processing.filter(note__notebook=notebook)
    hits = []
    if result:
        for hit in result.hits:
            chunk = hit.chunk
            hits.append(
                {
                    "hit": hit,
                    "chunk": chunk,
                    "attachment": chunk.attachment,
                    "note": chunk.attachment.note,
                    "snippet": highlight(chunk.content, query),
                }
            )
    context = {
        "notebook": notebook,
        "query": query,
        "mode": mode,
        "modes": MODES,
        "hits": hits,
        "result": result,
        "latency_ms": round(sum(result.timings.values()) * 1000) if result else None,
        "processing_count": processing.count(),
        "has_documents": NoteAttachment.objects.filter(
            note__notebook__in=notebook_list(user=request.user), status="ready"
        ).exists(),
        "error": error,
    }
    return render(request, "attachments/search.html", context)
