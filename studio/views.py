"""Studio's pages: the pane of a notebook (its outputs and one button per kind; it polls itself
while an output is being written), an output's page (and its progress fragment, which polls),
regenerate, cancel, rename, delete, and the downloads (Markdown; CSV for flashcards and
quizzes, which Anki imports)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from attachments.validation import download_name
from core.types import AuthenticatedHttpRequest
from notes.models import Role
from notes.selectors import notebook_get, notebook_role, role_allows
from studio import selectors, services
from studio.models import StudioOutput
from studio.rendering import Shown, ask_text, clock, date_label, speaker_label

KINDS = [
    StudioOutput.Kind.BRIEFING,
    StudioOutput.Kind.STUDY_GUIDE,
    StudioOutput.Kind.FAQ,
    StudioOutput.Kind.TIMELINE,
    StudioOutput.Kind.MIND_MAP,
    StudioOutput.Kind.FLASHCARDS,
    StudioOutput.Kind.QUIZ,
    StudioOutput.Kind.AUDIO,
]


def _error_text(output: StudioOutput) -> str:
    return _(output.error) if output.error else ""


def _pane(request: AuthenticatedHttpRequest, notebook_id: int, *, error: str = "",
          status: int = 200) -> HttpResponse:  # fmt: skip
    notebook = notebook_get(user=request.user, notebook_id=notebook_id)
    outputs = list(selectors.output_list(user=request.user, notebook_id=notebook.pk))
    context = {
        "notebook": notebook,
        "outputs": outputs,
        "kinds": [(kind.value, kind.label) for kind in KINDS],
        "can_edit": role_allows(notebook_role(user=request.user, notebook=notebook), Role.EDITOR),
        "active": any(o.is_active for o in outputs),
        "error": error,
    }
    if request.htmx:
        return render(request, "studio/_pane.html", context, status=status)
    return render(request, "studio/notebook.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def notebook_studio(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    """GET: the pane. POST (kind, and the sources ticked: `selections`/`excluded` as the chat
    sends them): a new output, queued; the pane comes back (htmx) or its page opens."""
    if request.method == "GET":
        return _pane(request, notebook_id)
    try:
        output = services.output_create(
            user=request.user,
            notebook_id=notebook_id,
            kind=request.POST.get("kind", ""),
            selections=request.POST.get("selections"),
            excluded=request.POST.get("excluded"),
        )
    except ValidationError as exc:
        # htmx swaps 2xx only (templates/base.html): the pane shows the error in place.
        status = 200 if request.htmx else 400
        return _pane(request, notebook_id, error=" ".join(exc.messages), status=status)
    if request.htmx:
        return _pane(request, notebook_id)
    return redirect("studio:output", output.pk)


def _context(request: AuthenticatedHttpRequest, output: StudioOutput) -> dict[str, Any]:
    role = notebook_role(user=request.user, notebook=output.notebook)
    return {
        "output": output,
        "notebook": output.notebook,
        "shown": Shown(output) if output.status == StudioOutput.Status.READY else None,
        "can_edit": role_allows(role, Role.EDITOR),
        "error": _error_text(output),
    }


@login_required
@require_http_methods(["GET"])
def output_page(request: AuthenticatedHttpRequest, output_id: int) -> HttpResponse:
    output = selectors.output_get(user=request.user, output_id=output_id)
    context = _context(request, output)
    if output.status == StudioOutput.Status.READY:
        context["body"] = _body(output, context["shown"])
    return render(request, "studio/output.html", context)


@login_required
@require_http_methods(["GET"])
def output_status(request: AuthenticatedHttpRequest, output_id: int) -> HttpResponse:
    """The progress line of an output being written; once it is done, the page reloads
    itself to show it (htmx: HX-Refresh)."""
    output = selectors.output_get(user=request.user, output_id=output_id)
    response = render(request, "studio/_status.html", _context(request, output))
    if not output.is_active and request.GET.get("was") == "active":
        response["HX-Refresh"] = "true"
    return response


def _back(request: AuthenticatedHttpRequest, output: StudioOutput) -> HttpResponse:
    """After a change: the page that asked (the pane, by htmx), else the output's page."""
    if request.POST.get("from") == "pane":
        if request.htmx:
            return _pane(request, output.notebook_id)
        return redirect(reverse("workspace:page", args=[output.notebook_id]) + "#pane-studio")
    url = reverse("studio:output", args=[output.pk])
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@login_required
@require_POST
def output_regenerate(request: AuthenticatedHttpRequest, output_id: int) -> HttpResponse:
    output = services.output_regenerate(user=request.user, output_id=output_id)
    return _back(request, output)


@login_required
@require_POST
def output_cancel(request: AuthenticatedHttpRequest, output_id: int) -> HttpResponse:
    output = services.output_cancel(user=request.user, output_id=output_id)
    return _back(request, output)


@login_required
@require_POST
def output_rename(request: AuthenticatedHttpRequest, output_id: int) -> HttpResponse:
    try:
        output = services.output_rename(
            user=request.user, output_id=output_id, title=request.POST.get("title", "")
        )
    except ValidationError as exc:
        output = selectors.output_get(user=request.user, output_id=output_id)
        context = {**_context(request, output), "rename_error": " ".join(exc.messages)}
        if output.status == StudioOutput.Status.READY:
            context["body"] = _body(output, context["shown"])
        return render(request, "studio/output.html", context, status=400)
    return _back(request, output)


@login_required
@require_http_methods(["GET", "POST"])
def output_delete(request: AuthenticatedHttpRequest, output_id: int) -> HttpResponse:
    output = selectors.output_get(user=request.user, output_id=output_id)
    if request.method == "GET":
        return render(request, "studio/delete.html", _context(request, output))
    notebook_id = output.notebook_id
    services.output_delete(user=request.user, output_id=output.pk)
    if request.POST.get("from") == "pane" and request.htmx:
        return _pane(request, notebook_id)
    messages.success(request, _("The output was deleted."))
    url = reverse("workspace:page", args=[notebook_id]) + "#pane-studio"
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@login_required
@require_http_methods(["GET"])
def output_audio(request: AuthenticatedHttpRequest, output_id: int) -> FileResponse:
    """An audio overview's MP3 (404 while it has none); `?download=1` saves it."""
    output = selectors.output_get(user=request.user, output_id=output_id)
    if not output.audio:
        raise Http404("No audio")
    response = FileResponse(
        output.audio.open("rb"),
        content_type="audio/mpeg",
        as_attachment=request.GET.get("download") == "1",
        filename=download_name(output.title or "audio-overview", ".mp3"),
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, max-age=3600"
    return response


# --- The body of a ready output, by kind


def _body(output: StudioOutput, shown: Shown) -> dict[str, Any]:
    """Sections with their items' HTML, in the shape the kind's template reads."""
    sections = []
    for section in output.content.get("sections") or []:
        items = []
        for item in section.get("items") or []:
            row: dict[str, Any] = {"item": item}
            if output.kind == StudioOutput.Kind.MIND_MAP:
                row["node"] = _node(item, shown, topic=False)
            elif output.kind == StudioOutput.Kind.FLASHCARDS:
                row["back"] = shown.html(item, "back")
            elif item.get("cited", True):
                row["html"] = shown.html(item)
            if output.kind == StudioOutput.Kind.TIMELINE:
                row["date"] = date_label(item)
            if output.kind == StudioOutput.Kind.QUIZ:
                row["options"] = list(enumerate(item.get("options") or []))
            if output.kind == StudioOutput.Kind.AUDIO:
                row["time"] = clock(item.get("start"))
                row["speaker"] = speaker_label(item, conversation=bool(output.model))
            items.append(row)
        sections.append({"heading": section.get("heading", ""), "items": items})
    body: dict[str, Any] = {"sections": sections}
    if output.kind == StudioOutput.Kind.AUDIO:
        spoken = output.content.get("audio") or {}
        body.update(length=clock(spoken.get("seconds")), engine=str(spoken.get("engine", "")))
    return body


def _node(node: dict[str, Any], shown: Shown, *, topic: bool) -> dict[str, Any]:
    children = node.get("children") or []
    return {
        "label": node.get("label", ""),
        "html": shown.html(node) if node.get("text") else "",
        "ask": ask_text(node, topic) if node.get("text") else "",
        "children": [_node(c, shown, topic=bool(c.get("topic"))) for c in children],
    }
