"""Chat pages: conversation lists per notebook and per note, the conversation itself, "Ask this
PDF", and the plain-form fallbacks of what the page otherwise does over its WebSocket
(chat.consumers). The notebook workspace itself is the `workspace` app's, above this one: chat
only links back to it (by URL name, `workspace_url`)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from attachments.selectors import attachment_get
from chat import answering, saving, selection, selectors, services
from chat.forms import AskForm, RenameForm
from chat.models import Conversation, Message
from chat.rendering import present
from core.params import parse_id
from core.ratelimit import (
    RateLimited,
    rate_limit,
    rate_limited_page,
    too_many_requests,
    user_key,
)
from core.types import AuthenticatedHttpRequest
from notes.selectors import note_get, note_list, notebook_get

LIST = "chat/conversation_list.html"
PAGE = "chat/conversation.html"
MESSAGE = "chat/_message.html"


def _list_url(conversation: Conversation) -> str:
    if conversation.note_id is not None:
        return reverse("chat:note_conversations", args=[conversation.note_id])
    return reverse("chat:notebook_conversations", args=[conversation.notebook_id])


def _answer_url(conversation: Conversation, message: Message) -> str:
    return reverse("chat:conversation", args=[conversation.pk]) + f"#message-{message.pk}"


def workspace_url(notebook_id: int, conversation_id: int | None = None) -> str:
    """The notebook's workspace (the `workspace` app's page), with a conversation open."""
    url = reverse("workspace:page", args=[notebook_id])
    return f"{url}?c={conversation_id}" if conversation_id else url


@login_required
@require_http_methods(["GET", "POST"])
def notebook_conversations(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    """The notebook's conversations (about it or about one of its notes); POST starts one about
    the whole notebook."""
    notebook = notebook_get(user=request.user, notebook_id=notebook_id)
    if request.method == "POST":
        conversation = services.conversation_create(owner=request.user, notebook=notebook)
        if request.POST.get("from") == "workspace":
            return redirect(workspace_url(notebook.pk, conversation.pk))
        return redirect("chat:conversation", conversation_id=conversation.pk)
    conversations = selectors.conversation_list(user=request.user, notebook_id=notebook.pk)
    context = {"notebook": notebook, "note": None, "conversations": conversations}
    return render(request, LIST, context)


@login_required
@require_http_methods(["GET", "POST"])
def note_conversations(request: AuthenticatedHttpRequest, note_id: int) -> HttpResponse:
    """The conversations about one note's PDFs; POST starts one."""
    note = note_get(user=request.user, note_id=note_id)
    if request.method == "POST":
        if note.is_trashed:
            messages.error(request, _("This note is in the trash. Restore it to ask about it."))
            return redirect("attachments:note_detail", note_id=note.pk)
        conversation = services.conversation_create(
            owner=request.user, notebook=note.notebook, note=note
        )
        return redirect("chat:conversation", conversation_id=conversation.pk)
    conversations = selectors.conversation_list(user=request.user, note_id=note.pk)
    context = {"notebook": note.notebook, "note": note, "conversations": conversations}
    return render(request, LIST, context)


def _conversation_page(
    request: AuthenticatedHttpRequest, conversation: Conversation, form: AskForm
) -> HttpResponse:
    answering.settle(conversation_id=conversation.pk)
    items = [
        present(m)
        for m in selectors.message_list(user=request.user, conversation_id=conversation.pk)
    ]
    context = {
        "conversation": conversation,
        "items": items,
        "form": form,
        "live": any(item.in_progress for item in items),
        "selection_state": _selection_state(request, conversation),
    }
    return render(request, PAGE, context)


def _selection_state(
    request: AuthenticatedHttpRequest, conversation: Conversation | None
) -> dict[str, object]:
    """The composer's chips: those just posted (kept when the question is refused), else the
    conversation's latest question's."""
    posted = request.POST if request.method == "POST" else {}
    return selection.form_state(conversation, posted.get("selections"), posted.get("excluded"))


@login_required
@require_http_methods(["GET"])
def conversation_detail(request: AuthenticatedHttpRequest, conversation_id: int) -> HttpResponse:
    conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
    return _conversation_page(request, conversation, AskForm())


@login_required
@require_POST
def conversation_ask(request: AuthenticatedHttpRequest, conversation_id: int) -> HttpResponse:
    """Without the socket: save the question, start the answer, show the page (which polls
    the answer until it is written)."""
    conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
    form = AskForm(request.POST)
    if form.is_valid():
        try:
            _, answer = answering.ask(
                user=request.user,
                conversation=conversation,
                content=form.cleaned_data["content"],
                mode=form.cleaned_data["mode"],
                selections=request.POST.get("selections"),
                excluded=request.POST.get("excluded"),
            )
        except RateLimited as exc:
            form.add_error(None, exc.message)  # the question stays in the form
            if request.htmx:
                context = {
                    "conversation": conversation,
                    "form": form,
                    "selection_state": _selection_state(request, conversation),
                }
                return too_many_requests(render(request, "chat/_ask_form.html", context), exc)
            return too_many_requests(_conversation_page(request, conversation, form), exc)
        except ValidationError as exc:
            form.add_error(None, exc)  # a dict of field errors lands on its fields
        else:
            if request.POST.get("from") == "workspace":
                url = workspace_url(conversation.notebook_id, conversation.pk)
                return redirect(f"{url}#message-{answer.pk}")
            return redirect(_answer_url(conversation, answer))
    return _conversation_page(request, conversation, form)


def _row(request: AuthenticatedHttpRequest, conversation_id: int) -> HttpResponse:
    """A row of the list (with its message count), after a rename in place."""
    conversation = selectors.conversation_list(user=request.user).get(pk=conversation_id)
    return render(request, f"{LIST}#conversation-row", {"conversation": conversation})


@login_required
@require_http_methods(["GET", "POST"])
def conversation_rename(request: AuthenticatedHttpRequest, conversation_id: int) -> HttpResponse:
    conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
    form = RenameForm(
        request.POST or None,
        initial={"title": conversation.title},
        auto_id=f"id_conversation{conversation.pk}_%s",
    )
    if request.method == "POST" and form.is_valid():
        try:
            services.conversation_rename(
                conversation=conversation, title=form.cleaned_data["title"]
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            if request.htmx:
                return _row(request, conversation.pk)
            return redirect("chat:conversation", conversation_id=conversation.pk)
    elif request.htmx and request.GET.get("cancel"):
        return _row(request, conversation.pk)
    template = "chat/conversation_rename.html"
    if request.htmx:
        template += "#rename-form"
    context = {"conversation": conversation, "form": form, "list_url": _list_url(conversation)}
    return render(request, template, context)


@login_required
@require_http_methods(["GET", "POST"])
def conversation_delete(request: AuthenticatedHttpRequest, conversation_id: int) -> HttpResponse:
    conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
    if request.method == "POST":
        back = _list_url(conversation)
        title = conversation.title
        services.conversation_delete(conversation=conversation)
        if request.htmx:
            return HttpResponse("")
        messages.success(request, _("Deleted the conversation “%(title)s”.") % {"title": title})
        return redirect(back)
    return render(request, "chat/conversation_delete.html", {"conversation": conversation})


@login_required
@require_http_methods(["GET"])
def message_detail(request: AuthenticatedHttpRequest, message_id: int) -> HttpResponse:
    """One message as the page shows it; an answer being written polls itself with this."""
    message = answering.settled(selectors.message_get(user=request.user, message_id=message_id))
    return render(request, MESSAGE, {"item": present(message)})


@login_required
@require_POST
def message_retry(request: AuthenticatedHttpRequest, message_id: int) -> HttpResponse:
    """Answer again (or, with `continue=1`, continue an answer cut short); either spends a
    question from the same budget as asking."""
    message = answering.settled(selectors.message_get(user=request.user, message_id=message_id))
    try:
        message = answering.retry(
            user=request.user,
            message=message,
            continue_answer=request.POST.get("continue") == "1",
        )
    except RateLimited as exc:
        page = _conversation_page(request, message.conversation, AskForm.refusing(exc.message))
        return too_many_requests(page, exc)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect(_answer_url(message.conversation, message))


@login_required
@require_POST
def message_save(request: AuthenticatedHttpRequest, message_id: int) -> HttpResponse:
    """Save to note: the answer into a new note (no `note`) or appended to the named one."""
    message = selectors.message_get(user=request.user, message_id=message_id)
    conversation = message.conversation
    note = None
    error = ""
    if raw := request.POST.get("note", "").strip():
        if (note_id := parse_id(raw)) is not None:
            note = note_get(user=request.user, note_id=note_id)
        else:
            error = _("Choose a note from the list.")
    refused: RateLimited | None = None
    status = 0
    if not error:
        try:
            rate_limit(scope="note", key=user_key(request.user))  # the note is indexed again
            note = saving.answer_save_to_note(user=request.user, answer=message, note=note)
        except RateLimited as exc:
            error, refused = exc.message, exc
        except ValidationError as exc:
            error = " ".join(exc.messages)
        except PermissionDenied as exc:  # a viewer of a shared notebook: said in place
            error, status = str(exc), 403
    context = {"message": message, "note": note, "error": error}
    if request.htmx:
        response = render(
            request, "chat/_saved.html", context, status=(status or 400) if error else 200
        )
        if refused:
            return too_many_requests(response, refused)
        if not error:
            response["HX-Trigger"] = "notes-changed"
        return response
    if refused:
        return rate_limited_page(request, refused, back_url=_answer_url(conversation, message))
    if error:
        messages.error(request, error)
    else:
        assert note is not None
        messages.success(
            request, _("Saved the answer to the note “%(title)s”.") % {"title": note.title}
        )
    back = request.POST.get("from") == "workspace"
    if back:
        return redirect(workspace_url(conversation.notebook_id, conversation.pk))
    return redirect(_answer_url(conversation, message))


@login_required
@require_http_methods(["GET"])
def message_save_form(request: AuthenticatedHttpRequest, message_id: int) -> HttpResponse:
    """The "Add to a note" form of an answer, with the notebook's notes to choose from."""
    message = selectors.message_get(user=request.user, message_id=message_id)
    notes = note_list(user=request.user, notebook_id=message.conversation.notebook_id)
    return render(request, "chat/_save_form.html", {"message": message, "notes": notes})


@login_required
@require_POST
def ask_pdf(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    """ "Ask this PDF": start a conversation scoped to one ready file, titled after it, and
    open it in its notebook's workspace (another user's file answers 404)."""
    attachment = attachment_get(user=request.user, attachment_id=attachment_id)
    if attachment.note.is_trashed:
        raise Http404("No such file.")
    try:
        conversation = services.conversation_about_file(owner=request.user, attachment=attachment)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect(workspace_url(attachment.note.notebook_id))
    return redirect(workspace_url(attachment.note.notebook_id, conversation.pk))
