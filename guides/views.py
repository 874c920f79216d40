"""Guide partials (they poll themselves while the guide is being written) and, without htmx,
the same on a page of its own."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from chat.models import Conversation
from chat.selectors import conversation_get
from core.params import parse_id
from core.types import AuthenticatedHttpRequest
from guides import services
from notes.models import Notebook


def _ask_notebook(request: AuthenticatedHttpRequest, notebook: Notebook) -> Notebook | None:
    """`?starters=new`: no conversation yet, the chips start one about `notebook`."""
    return notebook if request.GET.get("starters") == "new" else None


def _conversation(request: AuthenticatedHttpRequest) -> Conversation | None:
    """`?conversation=<id>`: the chat whose starter chips the guide shows (Http404 when it is
    not the user's)."""
    conversation_id = parse_id(request.GET.get("conversation"))
    if conversation_id is None:
        return None
    return conversation_get(user=request.user, conversation_id=conversation_id)


@login_required
@require_http_methods(["GET"])
def source_guide(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    found = services.source_guide_ensure(user=request.user, attachment_id=attachment_id)
    context: dict[str, Any] = {
        "attachment": found.attachment,
        "guide": found.guide,
        "conversation": _conversation(request),
        "ask_notebook": _ask_notebook(request, found.attachment.note.notebook),
    }
    if request.htmx:
        return render(request, "guides/_source_guide.html", context)
    context["notebook"] = found.attachment.note.notebook
    return render(request, "guides/page.html", context)


@login_required
@require_http_methods(["GET"])
def notebook_guide(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    found = services.notebook_guide_ensure(user=request.user, notebook_id=notebook_id)
    context = {
        "notebook": found.notebook,
        "guide": found.guide,
        "conversation": _conversation(request),
        "ask_notebook": _ask_notebook(request, found.notebook),
    }
    if request.htmx:
        return render(request, "guides/_notebook_guide.html", context)
    return render(request, "guides/page.html", context)
