"""Notebook and note pages. Thin: form → one selector/service → render; HTMX gets partials."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.formats import number_format
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from core.markdown import render_markdown
from core.ratelimit import (
    RateLimited,
    rate_limit,
    rate_limited_page,
    too_many_requests,
    user_key,
)
from core.types import AuthenticatedHttpRequest
from notes import selectors, services
from notes.forms import NotebookForm, NoteForm


def _template(request: AuthenticatedHttpRequest, page: str, partial: str) -> str:
    return f"{page}#{partial}" if request.htmx else page


@login_required
@require_http_methods(["GET", "POST"])
def notebook_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = NotebookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            notebook = services.notebook_create(
                owner=request.user,
                title=form.cleaned_data["title"],
                description=form.cleaned_data["description"],
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            if not request.htmx:
                return redirect("workspace:page", notebook_id=notebook.pk)
            messages.success(
                request, gettext("Created the notebook “%(title)s”.") % {"title": notebook.title}
            )
            form = NotebookForm()
    context = {"form": form, "notebooks": selectors.notebook_list(user=request.user)}
    return render(request, _template(request, "notes/notebook_list.html", "notebooks"), context)


@login_required
@require_http_methods(["GET", "POST"])
def notebook_rename(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id)
    # Own ids: in the list, this form sits beside the "New notebook" form with the same fields.
    form = NotebookForm(request.POST or None, instance=notebook, auto_id=f"id_nb{notebook.pk}_%s")
    if request.method == "POST" and form.is_valid():
        try:
            services.notebook_update(
                notebook=notebook,
                title=form.cleaned_data["title"],
                description=form.cleaned_data["description"],
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            if request.htmx:
                notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id)
                return render(
                    request, "notes/notebook_list.html#notebook-row", {"notebook": notebook}
                )
            return redirect("workspace:page", notebook_id=notebook.pk)
    context = {"form": form, "notebook": notebook}
    return render(request, _template(request, "notes/notebook_rename.html", "rename-form"), context)


@login_required
@require_http_methods(["GET", "POST"])
def notebook_delete(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id)
    if request.method == "POST":
        title = notebook.title
        services.notebook_delete(notebook=notebook)
        messages.success(
            request, gettext("Deleted the notebook “%(title)s” and its notes.") % {"title": title}
        )
        if request.htmx:
            return HttpResponseClientRedirect(reverse("notes:notebook_list"))
        return redirect("notes:notebook_list")
    trashed = selectors.note_list(user=request.user, notebook_id=notebook_id, trashed=True).count()
    return render(
        request, "notes/notebook_delete.html", {"notebook": notebook, "trashed_count": trashed}
    )


def _notebook_notes_context(
    request: AuthenticatedHttpRequest, notebook_id: int
) -> dict[str, object]:
    return {
        "notebook": selectors.notebook_get(user=request.user, notebook_id=notebook_id),
        "notes": selectors.note_list(user=request.user, notebook_id=notebook_id),
        "trashed_notes": selectors.note_list(
            user=request.user, notebook_id=notebook_id, trashed=True
        ),
    }


@login_required
@require_http_methods(["GET"])
def notebook_notes(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    """The workspace's notes list, refreshed after something wrote a note (Save to note)."""
    context = _notebook_notes_context(request, notebook_id)
    return render(request, "notes/_notes_pane.html#notes", context)


@login_required
@require_POST
def note_create(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id)
    back_url = reverse("workspace:page", args=[notebook.pk])
    try:
        rate_limit(scope="note", key=user_key(request.user))
        note = services.note_create(
            notebook=notebook, author=request.user, title=request.POST.get("title", "")
        )
    except RateLimited as exc:
        return rate_limited_page(request, exc, back_url=back_url)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect(back_url)
    return redirect("notes:note_edit", note_id=note.pk)


@login_required
@require_http_methods(["GET", "POST"])
def note_edit(request: AuthenticatedHttpRequest, note_id: int) -> HttpResponse:
    note = selectors.note_get(user=request.user, note_id=note_id)
    if note.is_trashed:
        messages.info(request, gettext("This note is in the trash. Restore it to edit it."))
        return redirect("attachments:note_detail", note_id=note.pk)
    saved_text = (note.title, note.body)  # the form writes the posted text into `note`
    form = NoteForm(request.POST or None, instance=note)
    refused: RateLimited | None = None
    if request.method == "POST" and form.is_valid():
        title, body = form.cleaned_data["title"], form.cleaned_data["body"]
        try:
            if (title, body) != saved_text:  # a save that changes the text indexes it again
                rate_limit(scope="note", key=user_key(request.user))
            services.note_update(note=note, title=title, body=body)
        except RateLimited as exc:
            refused = exc
            form.add_error(None, exc.message)
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, gettext("Saved."))
            return redirect("attachments:note_detail", note_id=note.pk)
    response = render(request, "notes/note_edit.html", {"note": note, "form": form})
    return too_many_requests(response, refused) if refused else response


@login_required
@require_POST
def note_preview(request: AuthenticatedHttpRequest, note_id: int) -> HttpResponse:
    """The posted body rendered, or why not: each preview spends the user's "preview" budget,
    and a body longer than a note may be is not rendered (Markdown takes seconds on such
    input, and the text could not be saved anyway)."""
    # Scoped like every other note URL, although it only renders the posted text.
    selectors.note_get(user=request.user, note_id=note_id)
    template = "notes/note_edit.html#preview"
    try:
        rate_limit(scope="preview", key=user_key(request.user))
    except RateLimited as exc:
        return too_many_requests(render(request, template, _preview_refusal(exc.message)), exc)
    body = request.POST.get("body", "")
    limit = settings.NOTE_BODY_MAX_CHARS
    if len(body) > limit:
        refusal = gettext(
            "Too long to preview: %(length)s characters, and a note holds at most %(limit)s. "
            "Shorten it to see the preview."
        ) % {
            "length": number_format(len(body), force_grouping=True),
            "limit": number_format(limit, force_grouping=True),
        }
        return render(request, template, _preview_refusal(refusal))
    return render(request, template, {"preview_html": render_markdown(body)})


def _preview_refusal(message: str) -> dict[str, SafeString]:
    return {"preview_html": format_html('<p class="error" role="alert">{}</p>', message)}


def _after_note_action(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    if request.htmx and request.POST.get("from") == "notebook":
        context = _notebook_notes_context(request, notebook_id)
        return render(request, "notes/_notes_pane.html#notes", context)
    if request.htmx:
        return HttpResponseClientRedirect(reverse("workspace:page", args=[notebook_id]))
    return redirect("workspace:page", notebook_id=notebook_id)


@login_required
@require_POST
def note_trash(request: AuthenticatedHttpRequest, note_id: int) -> HttpResponse:
    note = services.note_trash(note=selectors.note_get(user=request.user, note_id=note_id))
    messages.success(request, gettext("Moved “%(title)s” to the trash.") % {"title": note.title})
    return _after_note_action(request, note.notebook_id)


@login_required
@require_POST
def note_restore(request: AuthenticatedHttpRequest, note_id: int) -> HttpResponse:
    note = services.note_restore(note=selectors.note_get(user=request.user, note_id=note_id))
    messages.success(request, gettext("Restored “%(title)s”.") % {"title": note.title})
    return _after_note_action(request, note.notebook_id)


@login_required
@require_http_methods(["GET", "POST"])
def note_delete(request: AuthenticatedHttpRequest, note_id: int) -> HttpResponse:
    note = selectors.note_get(user=request.user, note_id=note_id)
    if request.method == "POST":
        try:
            services.note_delete(note=note)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            return redirect("attachments:note_detail", note_id=note.pk)
        messages.success(request, gettext("Deleted “%(title)s” forever.") % {"title": note.title})
        return _after_note_action(request, note.notebook_id)
    return render(request, "notes/note_delete.html", {"note": note})
