"""Export pages (a notebook as a ZIP, a conversation as Markdown, all of a user's data) and
account deletion. Every read goes through exports.bundles, which reads through the selectors
with request.user: another user's notebook or conversation answers 404."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from core.types import AuthenticatedHttpRequest
from exports import bundles, selectors, services
from exports.forms import AccountDeleteForm
from exports.responses import csv_response, markdown_response, pdf_response, zip_response

_FLAGS = {"": False, "0": False, "false": False, "1": True, "true": True}


def _originals(request: AuthenticatedHttpRequest, default: bool) -> bool | None:
    """`?originals=1|0|true|false`; None for anything else."""
    value = request.GET.get("originals")
    if value is None:
        return default
    return _FLAGS.get(value.lower())


def _bad_flag() -> HttpResponse:
    return HttpResponseBadRequest(
        gettext("“originals” is 1 (with the original files) or 0 (without)."),
        content_type="text/plain; charset=utf-8",
    )


@login_required
@require_http_methods(["GET"])
def notebook_export(
    request: AuthenticatedHttpRequest, notebook_id: int
) -> StreamingHttpResponse | HttpResponse:
    """The notebook as a ZIP of Markdown (with `?originals=1` its sources' files too)."""
    originals = _originals(request, default=False)
    if originals is None:
        return _bad_flag()
    bundle = bundles.notebook_bundle(
        user=request.user, notebook_id=notebook_id, originals=originals
    )
    return zip_response(request, bundle)


@login_required
@require_http_methods(["GET"])
def conversation_export(request: AuthenticatedHttpRequest, conversation_id: int) -> HttpResponse:
    """One of the user's conversations as a Markdown file, citations as footnotes."""
    filename, text = bundles.conversation_export(user=request.user, conversation_id=conversation_id)
    return markdown_response(filename, text)


@login_required
@require_http_methods(["GET"])
def user_export(request: AuthenticatedHttpRequest) -> StreamingHttpResponse | HttpResponse:
    """Everything the user owns and wrote, as one ZIP (`?originals=0`: without the files)."""
    originals = _originals(request, default=True)
    if originals is None:
        return _bad_flag()
    return zip_response(request, bundles.user_bundle(user=request.user, originals=originals))


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def account_delete(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Says what goes, asks for the password (or the username, without one); then deletes the
    account and everything it owns, logs out and lands on the login page."""
    user = request.user
    shared = selectors.shared_owned(user=user)
    form = AccountDeleteForm(request.POST or None, user=user, shared=shared)
    if request.method == "POST" and form.is_valid():
        try:
            deleted = services.account_delete(user=user, handover=form.handover())
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            logout(request)
            messages.success(
                request,
                gettext("The account “%(username)s” and everything it owned are deleted.")
                % {"username": deleted.username},
            )
            return redirect("login")
    status = 400 if request.method == "POST" else 200
    context = {
        "form": form,
        "holdings": selectors.account_holdings(user=user),
        "handover_fields": [form[f"handover_{notebook.pk}"] for notebook, _ in shared],
    }
    return render(request, "exports/account_delete.html", context, status=status)


@login_required
@require_http_methods(["GET"])
def studio_markdown(request: AuthenticatedHttpRequest, output_id: int) -> HttpResponse:
    """A Studio output as Markdown, citations as footnotes naming file, page and quote."""
    found = bundles.studio_export(user=request.user, output_id=output_id)
    if found is None:
        return _not_ready()
    return markdown_response(*found)


@login_required
@require_http_methods(["GET"])
def studio_pdf(request: AuthenticatedHttpRequest, output_id: int) -> HttpResponse:
    """A Studio output as PDF (exports.pdf): its statements, then its sources with quotes."""
    found = bundles.studio_pdf_export(user=request.user, output_id=output_id)
    if found is None:
        return _not_ready()
    return pdf_response(*found)


@login_required
@require_http_methods(["GET"])
def studio_csv(request: AuthenticatedHttpRequest, output_id: int) -> HttpResponse:
    """Flashcards or a quiz as CSV (front, back), which Anki imports."""
    found = bundles.studio_cards(user=request.user, output_id=output_id)
    if found is None:
        return _not_ready(cards=True)
    filename, rows = found
    return csv_response(filename, rows)


def _not_ready(*, cards: bool = False) -> HttpResponse:
    message = (
        gettext("Only ready flashcards and quizzes download as CSV.")
        if cards
        else gettext("This output is not ready yet.")
    )
    return HttpResponse(message, status=409, content_type="text/plain; charset=utf-8")
