"""The notebook workspace: one page with the notebook's sources, its chat and its notes, and
the first question of its empty chat.

It is a layer of its own, above `chat` and `guides`, because it composes the apps below it
(the chat's selectors and answering, `attachments.selectors.notebook_sources`,
`notes.selectors.note_list`); each pane is also a partial its own app serves, so HTMX can
refresh one pane without the others (the guides and their starter chips load with `hx-get`).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from attachments.selectors import notebook_sources
from attachments.services.links import links_available
from chat import answering, selection, selectors, services
from chat.forms import AskForm
from chat.models import Conversation
from chat.rendering import present
from chat.views import workspace_url
from core.params import parse_id
from core.ratelimit import RateLimited, too_many_requests
from core.types import AuthenticatedHttpRequest
from notes.forms import ShareForm
from notes.models import Role
from notes.selectors import file_note_list, membership_list, note_list, notebook_get

PAGE = "workspace/workspace.html"


def _current(request: AuthenticatedHttpRequest, notebook_id: int) -> Conversation | None:
    """The conversation `?c=` names (another notebook's or user's answers 404), else the most
    recently active one, else None (an empty chat)."""
    wanted = request.GET.get("c", "")
    if wanted:
        if (conversation_id := parse_id(wanted)) is None:
            raise Http404("No such conversation.")
        conversation = selectors.conversation_get(
            user=request.user, conversation_id=conversation_id
        )
        if conversation.notebook_id != notebook_id:
            raise Http404("No such conversation.")
        return conversation
    return selectors.conversation_list(user=request.user, notebook_id=notebook_id).first()


def _sources_context(request: AuthenticatedHttpRequest, notebook_id: int) -> dict[str, object]:
    """What the Sources pane and the counts around it show: the files grouped by the note
    holding them (`holder`: a note made for them and not written in, shown as its files
    alone), the notes made from Markdown or text files, and the written notes."""
    sources = list(notebook_sources(user=request.user, notebook_id=notebook_id))
    groups: dict[int, dict[str, object]] = {}
    for attachment in sources:
        group = groups.setdefault(
            attachment.note_id,
            {"note": attachment.note, "holder": not attachment.note.body, "sources": []},
        )
        group["sources"].append(attachment)  # type: ignore[attr-defined]
    file_notes = list(file_note_list(user=request.user, notebook_id=notebook_id))
    notes = note_list(user=request.user, notebook_id=notebook_id, written=True)
    return {
        "source_groups": list(groups.values()),
        "file_notes": file_notes,
        "source_count": len(sources) + len(file_notes),
        "notes": notes,
        # The "Into" choice of the drop zone: every live note, those holding files included.
        "note_choices": note_list(user=request.user, notebook_id=notebook_id),
    }


def _page(
    request: AuthenticatedHttpRequest,
    notebook_id: int,
    *,
    form: AskForm | None = None,
    conversation: Conversation | None = None,
    status: int = 200,
) -> HttpResponse:
    notebook = notebook_get(user=request.user, notebook_id=notebook_id)
    if conversation is None:
        conversation = _current(request, notebook.pk)
    items = []
    if conversation is not None:
        answering.settle(conversation_id=conversation.pk)
        listed = selectors.message_list(user=request.user, conversation_id=conversation.pk)
        items = [present(m) for m in listed]
    context = {
        **_sources_context(request, notebook.pk),
        "notebook": notebook,
        "conversation": conversation,
        "conversations": selectors.conversation_list(user=request.user, notebook_id=notebook.pk),
        "items": items,
        "form": form or AskForm(),
        "live": any(item.in_progress for item in items),
        "trashed_notes": note_list(user=request.user, notebook_id=notebook.pk, trashed=True),
        "max_upload_mb": settings.MAX_UPLOAD_MB,
        "links_enabled": links_available(),
        # The share dialog: who has access, and for the owner the form to add people.
        "members": list(membership_list(user=request.user, notebook_id=notebook.pk)),
        "share_form": ShareForm(),
        "is_owner": notebook.role == Role.OWNER,
        "workspace": True,
        # The composer's chips: those just posted (a refused question keeps them), else the
        # conversation's latest question's.
        "selection_state": selection.form_state(
            conversation, request.POST.get("selections"), request.POST.get("excluded")
        ),
    }
    return render(request, PAGE, context, status=status)


@login_required
@require_http_methods(["GET"])
def workspace(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    return _page(request, notebook_id)


@login_required
@require_POST
def workspace_ask(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    """The first question of an empty chat: start a conversation about the notebook and ask
    it. A refused question (empty, too long, over the budget) starts nothing and stays in the
    form."""
    notebook = notebook_get(user=request.user, notebook_id=notebook_id)
    form = AskForm(request.POST)
    if form.is_valid():
        try:
            # One transaction: a refused question leaves no empty conversation behind, and
            # the answer starts when it commits.
            with transaction.atomic():
                conversation = services.conversation_create(owner=request.user, notebook=notebook)
                _, answer = answering.ask(
                    user=request.user,
                    conversation=conversation,
                    content=form.cleaned_data["content"],
                    mode=form.cleaned_data["mode"],
                    selections=request.POST.get("selections"),
                    excluded=request.POST.get("excluded"),
                )
        except RateLimited as exc:
            form.add_error(None, exc.message)
            return too_many_requests(_page(request, notebook.pk, form=form), exc)
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            return redirect(workspace_url(notebook.pk, conversation.pk) + f"#message-{answer.pk}")
    return _page(request, notebook.pk, form=form, status=400)


@login_required
@require_http_methods(["GET"])
def sources_state(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    """The parts of the workspace that follow the sources as they arrive (no reload): the
    counts on the pane and its tabs, the notes made from text files, the empty state, the
    drop zone's "Into" choices (keeping `?note=`, the one chosen) and the chat's first hint.
    Out-of-band fragments only (the page asks with hx-swap="none" on "sources-changed")."""
    notebook = notebook_get(user=request.user, notebook_id=notebook_id)
    context = {
        **_sources_context(request, notebook.pk),
        "notebook": notebook,
        "chosen_note": parse_id(request.GET.get("note", "")),
    }
    return render(request, "workspace/_sources_state.html", context)
