"""The search page (global or per notebook) over the user's PDFs and notes."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from urllib.parse import quote

from django.contrib.auth.decorators import login_required
from django.db import DatabaseError
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.formats import date_format, number_format
from django.utils.timezone import localtime
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods

from attachments import selectors
from attachments.models import NoteAttachment
from core.params import parse_id
from core.ratelimit import RateLimited, rate_limit, too_many_requests, user_key
from core.types import AuthenticatedHttpRequest
from intelligence.selectors import doc_types_present
from notes.selectors import note_get, notebook_get, notebook_list, visible_notes
from search.any_language import search_any_language
from search.retrieval import DEGRADED, MAX_QUERY_CHARS, Scope, SearchResult
from search.snippets import heading_text, highlight, readable_text

__all__ = ["highlight", "search_page"]

logger = logging.getLogger(__name__)
# The modes, as people read them (the values are the API's).
MODES = (
    ("hybrid", _("Words and meaning")),
    ("lexical", _("Exact words")),
    ("vector", _("Similar meaning")),
    ("documents", _("Whole documents")),
)
# The document types of the filter (intelligence.models.SourceProfile.DocType values).
DOC_TYPES = (
    ("invoice", _("Invoices")),
    ("receipt", _("Receipts")),
    ("flight_ticket", _("Flight tickets")),
    ("order_confirmation", _("Order confirmations")),
    ("other", _("Other documents")),
)


def _degraded(result: SearchResult | None) -> str:
    """Why the vector leg was left out, in the reader's language (the API keeps the English
    `info.degraded`); reasons from elsewhere (an embedding server's error) stay as they came."""
    if result is None or not result.degraded_reason:
        return ""
    return gettext(DEGRADED) % {"reason": gettext(result.degraded_reason)}


def _budget_note(info: dict[str, Any]) -> str:
    """That the user's model-call budget kept the model out of this search, and until when
    (a time today, else a date and time)."""
    spent = info.get("model_budget")
    if not spent:
        return ""
    until = localtime(datetime.fromisoformat(spent["until"]))
    today = until.date() == localtime().date()
    when = date_format(until, "TIME_FORMAT" if today else "SHORT_DATETIME_FORMAT")
    return gettext(
        "Model budget used up: these results are ranked without the model until %(time)s."
    ) % {"time": when}


@login_required
@require_http_methods(["GET"])
def search_page(request: AuthenticatedHttpRequest, notebook_id: int | None = None) -> HttpResponse:
    """Search PDFs and notes, globally or in one notebook, with filters for notebook, note and
    file. A filter naming something the user may not see answers 404, as everywhere."""
    user = request.user
    # `is not None`: /notebooks/0/search/ names no notebook (404), not every notebook.
    notebook = notebook_get(user=user, notebook_id=notebook_id) if notebook_id is not None else None
    params = request.GET
    if notebook is None and (chosen := parse_id(params.get("notebook"))):
        notebook = notebook_get(user=user, notebook_id=chosen)
    note_id = parse_id(params.get("note"))
    note = note_get(user=user, note_id=note_id, include_trashed=False) if note_id else None
    if note and notebook and note.notebook_id != notebook.pk:
        note = None  # a note of another notebook: the notebook filter wins
    file_id = parse_id(params.get("file"))
    attachment = selectors.attachment_get(user=user, attachment_id=file_id) if file_id else None
    query = " ".join(params.get("q", "").split())
    mode = params.get("mode", "hybrid")
    mode = mode if mode in dict(MODES) else "hybrid"
    # The form marks itself as sent: an unticked box is then a choice; a link or a first
    # visit without it gets the defaults (notes included).
    sent = "sent" in params
    include_notes = params.get("notes") == "on" if sent else True
    diversity = params.get("diverse") == "on"
    doc_type = params.get("type", "")
    doc_type = doc_type if doc_type in dict(DOC_TYPES) else ""
    error = ""
    refused: RateLimited | None = None
    result = None
    if len(query) > MAX_QUERY_CHARS:
        error = ngettext(
            "Keep the question under %(limit)s character.",
            "Keep the question under %(limit)s characters.",
            MAX_QUERY_CHARS,
        ) % {"limit": number_format(MAX_QUERY_CHARS, force_grouping=True)}
    elif query:
        try:
            rate_limit(scope="search", key=user_key(user))
            result = search_any_language(
                user=user,
                query=query,
                scope=Scope(
                    notebook_id=notebook.pk if notebook else None,
                    note_id=note.pk if note else None,
                    attachment_ids=[attachment.pk] if attachment else None,
                    include_notes=include_notes,
                    doc_type=doc_type or None,
                ),
                limit=20,
                mode=mode,
                **({} if mode == "documents" else {"diversity": diversity}),
            )
        except RateLimited as exc:
            refused = exc
        except DatabaseError:  # the keyword leg failed (a vector failure only degrades)
            logger.exception("search for user %s failed", user.pk)
            error = gettext("Search failed: the database did not answer. Try again in a moment.")
    live_notes = visible_notes(user=user).filter(trashed_at__isnull=True)
    if notebook:
        live_notes = live_notes.filter(notebook=notebook)
    processing = NoteAttachment.objects.filter(  # not searchable yet, not even by keywords
        note__in=live_notes, status__in=("pending", "processing")
    ).exclude(NoteAttachment.searchable_q())
    hits = [
        {
            "hit": hit,
            "snippet": highlight(readable_text(hit), query),
            "heading": heading_text(hit),
        }
        for hit in (result.hits if result else [])
    ]
    timings = result.timings if result else {}
    documents = [
        {"hit": document, "snippet": highlight(readable_text(document.passage), query)}
        if document.passage
        else {"hit": document, "snippet": ""}
        for document in (result.documents if result else [])
    ]
    info = result.info if result else {}
    present = doc_types_present(user=user, notebook_id=notebook.pk if notebook else None)
    expansion = info.get("expansion") or {}
    stages = info.get("stages") or {}
    # "Search everything" (an empty result's tip): the same words and mode, no filters.
    everything = (
        reverse("search:notebook_search", args=[notebook.pk])
        if notebook and notebook_id is not None
        else reverse("search:search")
    )
    context = {
        "notebook": notebook,
        "fixed_notebook": notebook_id is not None,
        "query": query,
        "mode": mode,
        "modes": MODES,
        "hits": hits,
        "documents": documents,
        "count": len(documents) if mode == "documents" else len(hits),
        "expansion": expansion,
        # Offline, or the call failed: the query was searched as written; say why, translated.
        "expansion_note": gettext(info["expansion_fallback"])
        if info.get("expansion_fallback")
        else "",
        "budget_note": _budget_note(info),
        "stages_ms": {stage: round(s * 1000) for stage, s in stages.items()},
        # A type is offered only when the user has sources of it (a chosen one stays listed).
        "doc_types": [(v, label) for v, label in DOC_TYPES if v in present or v == doc_type],
        "doc_type_label": dict(DOC_TYPES).get(str((info.get("doc_type") or {}).get("value"))),
        "result": result,
        "latency_ms": round(result.total * 1000) if result else None,
        "timings_ms": {stage: round(s * 1000) for stage, s in timings.items()},
        "warming_up": bool(result and result.info.get("warming_up")),
        "degraded": _degraded(result),
        "everything_url": f"{everything}?q={quote(query)}&mode={mode}",
        # Each hit names its notebook only when the results come from more than one.
        "show_notebook": len({hit.note.notebook_id for hit in result.hits} if result else ()) > 1,
        "filtered": bool(note or attachment or doc_type or (notebook and notebook_id is None)),
        "processing_count": processing.count(),
        "has_sources": live_notes.exists(),
        "error": error,
        # Shown where the results go (the htmx region swaps a 429 in, see base.html).
        "refused": refused.message if refused else "",
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
            "doc_type": doc_type,
        },
    }
    # htmx asks for the results alone (the region refreshing itself while the model warms up).
    template = "search/search.html#results" if request.htmx else "search/search.html"
    response = render(request, template, context)
    return too_many_requests(response, refused) if refused else response
