"""Attachment pages and partials: upload, live status rows, download, page text, password."""

from __future__ import annotations

import itertools
import re

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST

from attachments import selectors, services
from attachments.models import NoteAttachment
from attachments.naming import display_name
from attachments.thumbnails import thumbnail_for
from attachments.validation import download_name, upload_batch_limit_error
from core.params import parse_id
from core.ratelimit import (
    RateLimited,
    rate_limit,
    rate_limited_page,
    too_many_requests,
    user_key,
)
from core.textutil import join_hyphenated
from core.types import AuthenticatedHttpRequest
from notes.models import Note, Notebook, Role
from notes.selectors import note_get, notebook_get, notebook_role, role_allows

ROW = "attachments/_row.html"
SOURCE_ROW = "attachments/_source.html"
TEXT_ROW = "attachments/_text_source.html"  # a text file that became a note


def _row(
    request: AuthenticatedHttpRequest,
    attachment: NoteAttachment,
    *,
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    context = {
        "attachment": attachment,
        "row_error": error,
        "read_only": _read_only(request, attachment.note.notebook),
    }
    return render(request, ROW, context, status=status)


def _read_only(request: AuthenticatedHttpRequest, notebook: Notebook) -> bool:
    """Whether the user only views this shared notebook: its pages leave out what they could
    not do (the server refuses it anyway)."""
    return not role_allows(notebook_role(user=request.user, notebook=notebook), Role.EDITOR)


@login_required
@require_POST
def attachment_upload(request: AuthenticatedHttpRequest, note_id: int) -> HttpResponse:
    """Files uploaded on a note's page: a PDF is attached to the note; a Markdown or text file
    becomes a new note of the same notebook (the note's own text is left alone). The page's
    uploader (XHR, one file per request) and htmx get row fragments (a row per stored file, an
    error row per refused one); a plain form post gets messages and a redirect back."""
    note = note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
    back = reverse("attachments:note_detail", args=[note.pk])
    added = gettext("Uploaded “%(name)s”. Processing starts now.")
    return _upload(request, notebook=note.notebook, note=note, back=back, row=ROW, added=added)


@login_required
@require_POST
def notebook_source_upload(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    """Files dropped on the workspace's sources pane. `note` names a note of the notebook to
    attach PDFs to; without one, each PDF becomes a new note titled after it. A text file
    always becomes a new note. Answers like `attachment_upload`."""
    notebook = notebook_get(user=request.user, notebook_id=notebook_id, role=Role.EDITOR)
    back = reverse("workspace:page", args=[notebook.pk])
    fragment = _wants_fragment(request)
    note = None
    if raw := request.POST.get("note", "").strip():
        if (note_id := parse_id(raw)) is None:
            return _refuse(request, fragment, back, gettext("Choose a note from the list."))
        note = note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
        if note.notebook_id != notebook.pk:
            return _refuse(request, fragment, back, gettext("That note is in another notebook."))
    added = gettext("Added “%(name)s” to the note “%(title)s”. Processing starts now.")
    return _upload(request, notebook=notebook, note=note, back=back, row=SOURCE_ROW, added=added)


def _wants_fragment(request: AuthenticatedHttpRequest) -> bool:
    return bool(request.htmx) or request.headers.get("X-Upload") == "1"


def _upload(
    request: AuthenticatedHttpRequest,
    *,
    notebook: Notebook,
    note: Note | None,
    back: str,
    row: str,
    added: str,
) -> HttpResponse:
    """The upload loop both upload views share: rate limit, then each file through
    `services.source_add` on its own (one refused file does not stop the others). `row` is
    the template of a stored PDF's row, `added` the message saying so (%(name)s, %(title)s)."""
    fragment = _wants_fragment(request)
    files = request.FILES.getlist("files")
    if not files:
        return _refuse(request, fragment, back, gettext("Choose one or more files first."))
    if (too_many := upload_batch_limit_error(len(files))) is not None:
        return _refuse(request, fragment, back, " ".join(too_many.messages))
    try:
        rate_limit(scope="upload", key=user_key(request.user), cost=len(files))
    except RateLimited as exc:
        if fragment:
            return too_many_requests(
                _fragments([_error_html(request, exc.message)], status=429), exc
            )
        return rate_limited_page(request, exc, back_url=back)
    html: list[str] = []
    status = 201
    for uploaded in files:
        try:
            source = services.source_add(
                user=request.user, notebook=notebook, note=note, uploaded=uploaded
            )
        except ValidationError as exc:  # DuplicateAttachment and DuplicateText included
            existing = getattr(exc, "existing", None)
            existing_note = getattr(exc, "existing_note", None)
            message = " ".join(exc.messages)
            html.append(
                _error_html(request, message, existing=existing, existing_note=existing_note)
            )
            if len(files) == 1:
                status = 409 if existing or existing_note else 400
            if not fragment:
                messages.error(request, message)
            continue
        if source.note is not None:
            context = {"note": source.note, "name": source.name}
            html.append(render(request, TEXT_ROW, context).content.decode())
            if not fragment:
                messages.success(
                    request,
                    gettext("Added “%(name)s” as the note “%(title)s”.")
                    % {"name": source.name, "title": source.note.title},
                )
            continue
        attachment = source.attachment
        assert attachment is not None
        context = {"attachment": attachment, "show_note": True}
        html.append(render(request, row, context).content.decode())
        if not fragment:
            messages.success(
                request, added % {"name": attachment.original_name, "title": attachment.note.title}
            )
    if fragment:
        return _fragments(html, status=status)
    return redirect(back)


@login_required
@require_POST
def notebook_link_add(request: AuthenticatedHttpRequest, notebook_id: int) -> HttpResponse:
    """ "Add a link" on the workspace's sources pane: a web page (or a YouTube video's
    transcript) by its address, on a new note titled after it; the worker fetches it. Answers
    like the upload views (a source row, or an error row; messages and a redirect without
    JavaScript)."""
    notebook = notebook_get(user=request.user, notebook_id=notebook_id, role=Role.EDITOR)
    back = reverse("workspace:page", args=[notebook.pk])
    fragment = _wants_fragment(request)
    try:
        rate_limit(scope="upload", key=user_key(request.user))
        attachment = services.source_add_link(
            user=request.user, notebook=notebook, url=request.POST.get("url", "")
        )
    except RateLimited as exc:
        if fragment:
            return too_many_requests(
                _fragments([_error_html(request, exc.message)], status=429), exc
            )
        return rate_limited_page(request, exc, back_url=back)
    except ValidationError as exc:  # DuplicateAttachment included
        message = " ".join(exc.messages)
        existing = getattr(exc, "existing", None)
        if fragment:
            html = _error_html(request, message, existing=existing)
            # htmx swaps 2xx only (templates/base.html): the error row is shown in place.
            status = 200 if request.htmx else 409 if existing else 400
            return _fragments([html], status=status)
        messages.error(request, message)
        return redirect(back)
    if fragment:
        context = {"attachment": attachment, "show_note": True}
        response = _fragments([render(request, SOURCE_ROW, context).content.decode()], status=201)
        response["HX-Trigger"] = "sources-changed"  # the workspace's counts follow
        return response
    messages.success(
        request, gettext("Added “%(name)s”. Fetching it now.") % {"name": attachment.original_name}
    )
    return redirect(back)


def _refuse(
    request: AuthenticatedHttpRequest, fragment: bool, back: str, message: str
) -> HttpResponse:
    if fragment:
        return _fragments([_error_html(request, message)], status=400)
    messages.error(request, message)
    return redirect(back)


@login_required
@require_http_methods(["GET"])
def source_row(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    """A source in the workspace's sources pane; it polls itself while being processed."""
    attachment = selectors.attachment_get(user=request.user, attachment_id=attachment_id)
    return render(request, SOURCE_ROW, {"attachment": attachment})


def _fragments(html: list[str], *, status: int) -> HttpResponse:
    response = HttpResponse("".join(html), status=status)
    response["X-Notebook-Fragment"] = "attachment-rows"  # upload.js inserts only these
    return response


def _error_html(
    request: AuthenticatedHttpRequest,
    message: str,
    existing: NoteAttachment | None = None,
    existing_note: Note | None = None,
) -> str:
    context = {"message": message, "existing": existing, "existing_note": existing_note}
    return render(request, "attachments/_upload_error.html", context).content.decode()


@login_required
@require_http_methods(["GET"])
def attachment_row(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    """The status row; it polls itself while the attachment is queued or processing."""
    return _row(request, selectors.attachment_get(user=request.user, attachment_id=attachment_id))


@login_required
@require_http_methods(["GET"])
def attachment_download(request: AuthenticatedHttpRequest, attachment_id: int) -> FileResponse:
    attachment = selectors.attachment_get(user=request.user, attachment_id=attachment_id)
    # FileResponse writes Content-Disposition with an RFC 5987 filename* for non-ASCII names
    # and escapes quotes; the name was stripped of control characters at upload.
    response = FileResponse(
        attachment.file.open("rb"),
        content_type=attachment.media_type,
        # A non-PDF source (HTML among them) is never shown from our origin: saved instead.
        as_attachment=request.GET.get("download") == "1" or bool(attachment.format),
        filename=download_name(display_name(attachment), attachment.extension),
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'; object-src 'none'"
    response["Cache-Control"] = "private, max-age=3600"
    return response


@login_required
@require_http_methods(["GET"])
def attachment_thumbnail(request: AuthenticatedHttpRequest, attachment_id: int) -> FileResponse:
    """A small WebP of the source (an image scaled down, a PDF's first page), made now if a
    ready file has none yet; 404 when there is none (or the file is not the user's)."""
    attachment = selectors.attachment_get(user=request.user, attachment_id=attachment_id)
    path = thumbnail_for(attachment)
    if path is None:
        raise Http404("No thumbnail")
    response = FileResponse(path.open("rb"), content_type="image/webp")
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, max-age=3600"
    return response


@login_required
@require_http_methods(["GET"])
def attachment_pages(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    """The extracted text, page by page, running heads and footers dimmed. `?page=N&quote=…`
    marks a cited quote on page N (the quote matches whatever whitespace the page has between
    its words)."""
    attachment = selectors.attachment_get(user=request.user, attachment_id=attachment_id)
    pages = list(selectors.attachment_pages(user=request.user, attachment_id=attachment_id))
    quote = request.GET.get("quote", "")[:2000]
    page_number = request.GET.get("page", "")
    found = None
    for page in pages:
        span = quote_span(page.text, quote) if quote and page_number == str(page.number) else None
        if quote and page_number == str(page.number):
            found = span is not None
        setattr(page, "html", page_html(page.text, page.running, span))  # noqa: B010
    context = {
        "attachment": attachment,
        "pages": pages,
        "quote": quote,
        "quote_found": found,
        "has_running": any(page.running for page in pages),
    }
    return render(request, "attachments/pages.html", context)


_WHITESPACE = re.compile(r"\s+")  # the characters str.split() splits on


def quote_span(text: str, quote: str) -> tuple[int, int] | None:
    """(start, end) in `text` of the first whitespace-insensitive occurrence of `quote`, or of
    it in `text` with the words cut at line ends whole again (an answer quotes "commands"
    where the page has "com-\nmands"); None when it is not there."""
    span = _folded_span(text, quote)
    if span is not None or "-" not in text:
        return span
    joined, origin = join_hyphenated(text)
    span = _folded_span(joined, quote) if joined != text else None
    if span is None:
        return None
    return origin[span[0]], origin[span[1] - 1] + 1


def _folded_span(text: str, quote: str) -> tuple[int, int] | None:
    """(start, end) in `text` of the first whitespace-insensitive occurrence of `quote`; None
    when it is not there. Linear in text + quote: both have their runs of whitespace folded to
    one space and str.find looks for the one in the other (a regex of the quote's words would
    backtrack wherever the page almost matches: seconds on a long page)."""
    needle = " ".join(quote.split())
    if not needle:
        return None
    found = _WHITESPACE.sub(" ", text).find(needle)
    if found < 0:
        return None
    # Back to offsets in `text`: a non-space character lies `shift` further on there, shift
    # being what the runs of whitespace before it lost in folding. The needle's first and
    # last characters are not spaces.
    last = found + len(needle) - 1
    start = -1
    shift = 0
    for space in _WHITESPACE.finditer(text):
        folded_at = space.start() - shift
        if start < 0 and found < folded_at:
            start = found + shift
        if last < folded_at:
            break
        shift += len(space[0]) - 1
    if start < 0:
        start = found + shift
    return start, last + shift + 1


def mark_quote(text: str, quote: str) -> SafeString | None:
    """`text` escaped, with the first whitespace-insensitive occurrence of `quote` in <mark>;
    None when the quote is not there."""
    span = quote_span(text, quote)
    return page_html(text, [], span) if span else None


def page_html(text: str, running: list[list[int]], mark: tuple[int, int] | None) -> SafeString:
    """`text` escaped; running heads and footers (spans [start, end]) in a dimmed span, the
    quote at `mark` in <mark id="quote"> (a running line inside it is dimmed within it)."""
    spans = [(max(0, a), min(len(text), b)) for a, b in running if a < b]
    cuts = sorted({0, len(text), *(x for span in spans for x in span), *(mark or ())})
    out: list[str] = []
    for a, b in itertools.pairwise(cuts):
        if mark and a == mark[0]:
            out.append('<mark id="quote">')
        if any(s <= a and b <= e for s, e in spans):
            out.append(
                format_html(
                    '<span class="running-line" title="{}">{}</span>', RUNNING_LINE_TITLE, text[a:b]
                )
            )
        else:
            out.append(escape(text[a:b]))
        if mark and b == mark[1]:
            out.append("</mark>")
    return mark_safe("".join(out))  # noqa: S308 - every piece of text is escaped above


RUNNING_LINE_TITLE = gettext_lazy(
    "A running head or footer: left out of search, answers and citations"
)


@login_required
@require_POST
def attachment_reprocess(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    attachment = selectors.attachment_get(
        user=request.user, attachment_id=attachment_id, role=Role.EDITOR
    )
    error = ""
    refused: RateLimited | None = None
    try:
        rate_limit(scope="reprocess", key=user_key(request.user))
        attachment = services.attachment_reprocess(attachment=attachment)
    except RateLimited as exc:
        error, refused = exc.message, exc
    except ValidationError as exc:
        error = " ".join(exc.messages)
    if request.htmx:
        row = _row(request, attachment, error=error)
        return too_many_requests(row, refused) if refused else row
    if refused:
        return rate_limited_page(
            request, refused, back_url=reverse("attachments:note_detail", args=[attachment.note_id])
        )
    if error:
        messages.error(request, error)
    return redirect("attachments:note_detail", note_id=attachment.note_id)


@login_required
@require_http_methods(["GET", "POST"])
def attachment_delete(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    attachment = selectors.attachment_get(
        user=request.user, attachment_id=attachment_id, role=Role.EDITOR
    )
    if request.method == "POST":
        services.attachment_delete(attachment=attachment)
        if request.htmx:
            return HttpResponse("")
        messages.success(
            request, gettext("Deleted “%(name)s”.") % {"name": attachment.original_name}
        )
        return redirect("attachments:note_detail", note_id=attachment.note_id)
    return render(request, "attachments/delete.html", {"attachment": attachment})


@login_required
@require_POST
def attachment_password(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    attachment = selectors.attachment_get(
        user=request.user, attachment_id=attachment_id, role=Role.EDITOR
    )
    error = ""
    try:
        attachment = services.attachment_submit_password(
            attachment=attachment, password=request.POST.get("password", "")
        )
    except ValidationError as exc:
        error = " ".join(exc.messages)
        attachment.refresh_from_db()
    if request.htmx:
        return _row(request, attachment, error=error, status=200)
    if error:
        messages.error(request, error)
    return redirect("attachments:note_detail", note_id=attachment.note_id)


@login_required
@require_POST
def attachment_unlock_reset(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    attachment = services.attachment_unlock_reset(
        attachment=selectors.attachment_get(
            user=request.user, attachment_id=attachment_id, role=Role.EDITOR
        )
    )
    if request.htmx:
        return _row(request, attachment)
    return redirect("attachments:note_detail", note_id=attachment.note_id)


@login_required
@require_http_methods(["GET"])
def note_detail(request: AuthenticatedHttpRequest, note_id: int) -> HttpResponse:
    """A note with its sources (here, not in notes/: the page reads both layers)."""
    note = note_get(user=request.user, note_id=note_id)
    context = {
        "note": note,
        "read_only": _read_only(request, note.notebook),
        "attachments": selectors.attachment_list(user=request.user, note_id=note.pk),
        "max_upload_mb": settings.MAX_UPLOAD_MB,
    }
    return render(request, "notes/note_detail.html", context)
