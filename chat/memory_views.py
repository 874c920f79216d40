"""The Memory panel of a notebook (on the notebook page through the `notebook_memories`
template tag, and on a page of its own): delete one memory, or forget all after a
confirmation step that works without JavaScript. With HTMX each action swaps the panel."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_http_methods, require_POST

from chat import memory as memories
from chat import selectors
from core.types import AuthenticatedHttpRequest
from notes.models import Notebook
from notes.selectors import notebook_get

PANEL = "chat/_memories.html"
PAGE = "chat/memories.html"


def _back(request: AuthenticatedHttpRequest, notebook: Notebook) -> str:
    """Where the panel was shown (its forms carry it as `next`): this site only; else the
    notebook page."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    safe = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if target and safe else reverse("workspace:page", args=[notebook.pk])


def _show(
    request: AuthenticatedHttpRequest, notebook: Notebook, *, back: str, confirm: bool = False
) -> HttpResponse:
    """The panel alone for HTMX, else the memory page."""
    context = {"notebook": notebook, "back": back, "confirm_forget": confirm}
    return render(request, PANEL if request.htmx else PAGE, context)


@login_required
@require_http_methods(["GET"])
def notebook_memories(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    """The notebook's memories on a page of their own (or the panel, for HTMX)."""
    notebook = notebook_get(user=request.user, notebook_id=notebook_id)
    back = _back(request, notebook) if request.htmx else request.path
    return _show(request, notebook, back=back)


@login_required
@require_http_methods(["GET", "POST"])
def memories_forget(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    """GET asks to confirm; POST forgets every memory of the notebook (the user's own)."""
    notebook = notebook_get(user=request.user, notebook_id=notebook_id)
    back = _back(request, notebook)
    if request.method == "POST":
        count = memories.memory_forget_all(owner=request.user, notebook=notebook)
        if request.htmx:
            return _show(request, notebook, back=back)
        forgot = ngettext(
            "Forgot %(count)d memory of “%(title)s”.",
            "Forgot %(count)d memories of “%(title)s”.",
            count,
        ) % {"count": count, "title": notebook.title}
        messages.success(request, forgot)
        return redirect(back)
    return _show(request, notebook, back=back, confirm=True)


@login_required
@require_POST
def memory_delete(request: AuthenticatedHttpRequest, memory_id: int) -> HttpResponse:
    memory = selectors.memory_get(user=request.user, memory_id=memory_id)
    notebook = memory.notebook
    back = _back(request, notebook)
    memories.memory_delete(memory=memory)
    if request.htmx:
        return _show(request, notebook, back=back)
    messages.success(request, _("Forgot one memory."))
    return redirect(back)
