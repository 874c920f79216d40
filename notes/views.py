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
from notes.forms import NotebookForm, NoteForm, RoleForm, ShareForm
from notes.models import Role


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
            # A new notebook opens at once (it is empty: adding sources is what comes next).
            if request.htmx:
                return HttpResponseClientRedirect(reverse("workspace:page", args=[notebook.pk]))
            return redirect("workspace:page", notebook_id=notebook.pk)
    notebooks = list(selectors.notebook_list(user=request.user).select_related("owner"))
    context = {
        "form": form,
        "notebooks": [n for n in notebooks if n.role == Role.OWNER],
        "shared_notebooks": [n for n in notebooks if n.role != Role.OWNER],
    }
    return render(request, _template(request, "notes/notebook_list.html", "notebooks"), context)


@login_required
@require_http_methods(["GET", "POST"])
def notebook_rename(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id, role=Role.OWNER)
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
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id, role=Role.OWNER)
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
    context = {
        "notebook": notebook,
        "trashed_count": trashed,
        "contents": selectors.notebook_contents(user=request.user, notebook_id=notebook_id),
    }
    return render(request, "notes/notebook_delete.html", context)


def _notebook_notes_context(
    request: AuthenticatedHttpRequest, notebook_id: int
) -> dict[str, object]:
    return {
        "notebook": selectors.notebook_get(user=request.user, notebook_id=notebook_id),
        "notes": selectors.note_list(user=request.user, notebook_id=notebook_id, written=True),
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
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id, role=Role.EDITOR)
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
    note = selectors.note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
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
            services.note_update(note=note, title=title, body=body, editor=request.user)
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
    selectors.note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
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
        response = render(request, "notes/_notes_pane.html#notes", context)
        # A note made from a text file is listed under Sources too: that pane follows.
        response["HX-Trigger"] = "sources-changed"
        return response
    if request.htmx:
        return HttpResponseClientRedirect(reverse("workspace:page", args=[notebook_id]))
    return redirect("workspace:page", notebook_id=notebook_id)


@login_required
@require_POST
def note_trash(request: AuthenticatedHttpRequest, note_id: int) -> HttpResponse:
    note = services.note_trash(
        note=selectors.note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
    )
    messages.success(request, gettext("Moved “%(title)s” to the trash.") % {"title": note.title})
    return _after_note_action(request, note.notebook_id)


@login_required
@require_POST
def note_restore(request: AuthenticatedHttpRequest, note_id: int) -> HttpResponse:
    note = services.note_restore(
        note=selectors.note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
    )
    messages.success(request, gettext("Restored “%(title)s”.") % {"title": note.title})
    return _after_note_action(request, note.notebook_id)


@login_required
@require_http_methods(["GET", "POST"])
def note_delete(request: AuthenticatedHttpRequest, note_id: int) -> HttpResponse:
    note = selectors.note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
    if request.method == "POST":
        try:
            services.note_delete(note=note)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
            return redirect("attachments:note_detail", note_id=note.pk)
        messages.success(request, gettext("Deleted “%(title)s” forever.") % {"title": note.title})
        return _after_note_action(request, note.notebook_id)
    return render(request, "notes/note_delete.html", {"note": note})


# --- sharing ------------------------------------------------------------------------------------


def _share_response(
    request: AuthenticatedHttpRequest,
    notebook_id: int,
    *,
    form: ShareForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The share panel (htmx: the partial, swapped in place in the dialog; else the page)."""
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id)
    context = {
        "notebook": notebook,
        "members": selectors.membership_list(user=request.user, notebook_id=notebook_id),
        "share_form": form or ShareForm(),
        "is_owner": notebook.role == Role.OWNER,
    }
    template = _template(request, "notes/notebook_share.html", "share-panel")
    return render(request, template, context, status=status)


def _back_to_share(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    if request.htmx:
        return _share_response(request, notebook_id)
    return redirect("notes:notebook_share", notebook_id=notebook_id)


@login_required
@require_http_methods(["GET", "POST"])
def notebook_share(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    """Who has access (any member sees it); the owner adds people by username or email."""
    if request.method == "GET":
        return _share_response(request, notebook_id)
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id, role=Role.OWNER)
    form = ShareForm(request.POST)
    if form.is_valid():
        try:
            membership = services.membership_add(
                notebook=notebook,
                by=request.user,
                identifier=form.cleaned_data["user"],
                role=form.cleaned_data["role"],
            )
        except ValidationError as exc:
            for message in exc.messages:
                form.add_error("user", message)
        else:
            messages.success(
                request,
                gettext("Shared with %(user)s as %(role)s.")
                % {"user": membership.user.get_username(), "role": membership.get_role_display()},
            )
            return _back_to_share(request, notebook_id)
    # The form again with what is wrong (htmx swaps only 2xx here: templates/base.html).
    return _share_response(request, notebook_id, form=form, status=200 if request.htmx else 400)


@login_required
@require_POST
def member_update(
    request: AuthenticatedHttpRequest, notebook_id: int, member_id: int
) -> HttpResponse:
    """The owner makes a member a viewer or an editor."""
    membership = selectors.membership_get(
        user=request.user, notebook_id=notebook_id, member_id=member_id
    )
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, gettext("Choose viewer or editor."))
        return _share_response(request, notebook_id, status=200 if request.htmx else 400)
    services.membership_set_role(membership=membership, role=form.cleaned_data["role"])
    messages.success(
        request,
        gettext("%(user)s is now %(role)s.")
        % {"user": membership.user.get_username(), "role": membership.get_role_display()},
    )
    return _back_to_share(request, notebook_id)


@login_required
@require_POST
def member_remove(
    request: AuthenticatedHttpRequest, notebook_id: int, member_id: int
) -> HttpResponse:
    """The owner takes a member's access away, at once."""
    membership = selectors.membership_get(
        user=request.user, notebook_id=notebook_id, member_id=member_id
    )
    name = membership.user.get_username()
    services.membership_remove(membership=membership)
    messages.success(request, gettext("%(user)s no longer has access.") % {"user": name})
    return _back_to_share(request, notebook_id)


@login_required
@require_POST
def notebook_transfer(
    request: AuthenticatedHttpRequest, notebook_id: int, member_id: int
) -> HttpResponse:
    """The owner hands the notebook to a member and stays on as an editor."""
    membership = selectors.membership_get(
        user=request.user, notebook_id=notebook_id, member_id=member_id
    )
    notebook = services.notebook_transfer(notebook=membership.notebook, to=membership)
    messages.success(
        request,
        gettext("%(user)s now owns “%(title)s”; you are an editor.")
        % {"user": membership.user.get_username(), "title": notebook.title},
    )
    return _back_to_share(request, notebook_id)


@login_required
@require_POST
def notebook_leave(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    """A member leaves a notebook shared with them (the owner cannot: they hand it over or
    delete it)."""
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id)
    membership = (
        selectors.membership_list(user=request.user, notebook_id=notebook_id)
        .filter(user=request.user)
        .first()
    )
    if membership is None:
        messages.error(
            request, gettext("You own this notebook: hand it to a member or delete it instead.")
        )
        return redirect("notes:notebook_share", notebook_id=notebook_id)
    services.membership_remove(membership=membership)
    messages.success(request, gettext("You left “%(title)s”.") % {"title": notebook.title})
    if request.htmx:
        return HttpResponseClientRedirect(reverse("notes:notebook_list"))
    return redirect("notes:notebook_list")
