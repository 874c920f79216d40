"""The composer's mention suggestions as JSON, for static/js/composer.js."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from chat.mentions import suggest
from core.params import parse_id
from core.types import AuthenticatedHttpRequest
from notes.selectors import notebook_get

MAX_TERM_CHARS = 200


@login_required
@require_http_methods(["GET"])
def mentions(request: AuthenticatedHttpRequest) -> JsonResponse:
    """GET ?notebook=<id>&q=<term>&all=0|1: ranked suggestions (another user's notebook: 404)."""
    notebook_id = parse_id(request.GET.get("notebook"))
    if notebook_id is None:
        raise Http404("No such notebook.")
    notebook = notebook_get(user=request.user, notebook_id=notebook_id)
    results = suggest(
        user=request.user,
        notebook=notebook,
        term=request.GET.get("q", "")[:MAX_TERM_CHARS],
        everything=request.GET.get("all", "0") == "1",
    )
    return JsonResponse({"results": results, "empty": _("No more files found.")})
