"""The split view of one source (document left, extracted data right) and the owner's edits."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_http_methods

from attachments.models import NoteAttachment
from attachments.naming import display_name, suggested_name
from core.types import AuthenticatedHttpRequest
from intelligence import selectors, services
from intelligence.models import SourceProfile
from notes.models import Role
from notes.selectors import notebook_role, role_allows

if TYPE_CHECKING:
    from core.types import User


class ProfileForm(forms.Form):
    doc_type = forms.ChoiceField(
        label=gettext_lazy("Document type"), choices=SourceProfile.DocType.choices
    )
    better_name = forms.CharField(label=gettext_lazy("Name"), max_length=200)
    extracted = forms.CharField(
        label=gettext_lazy("Extracted data (JSON)"), widget=forms.Textarea(attrs={"rows": 16})
    )

    def clean_extracted(self) -> dict[str, Any]:
        return services.parse_extracted(self.cleaned_data["extracted"])


def _rows(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """The extracted JSON flattened to (label, text) rows for a definition list; the template
    escapes both (document text never becomes markup)."""
    rows: list[tuple[str, str]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            label = f"{prefix}{str(key).replace('_', ' ')}"
            if isinstance(item, dict | list) and item:
                rows += _rows(item, f"{label} › ")
            else:
                rows.append((label, "—" if item in (None, "", [], {}) else str(item)))
    elif isinstance(value, list):
        for n, item in enumerate(value, 1):
            if isinstance(item, dict | list):
                rows += _rows(item, f"{prefix}{n} › ")
            else:
                rows.append((f"{prefix}{n}", str(item)))
    return rows


def _context(
    attachment: NoteAttachment, user: User, form: ProfileForm | None = None
) -> dict[str, Any]:
    profile = selectors.profile_of(attachment)
    recognised = bool(profile and profile.recognised)
    if form is None and profile is not None:
        # An unrecognised profile's guesses are not shown, not even as the form's defaults.
        form = ProfileForm(
            initial={
                "doc_type": profile.doc_type,
                "better_name": profile.better_name,
                "extracted": json.dumps(profile.extracted, indent=2, ensure_ascii=False),
            }
            if recognised
            else {
                "doc_type": SourceProfile.DocType.OTHER,
                "better_name": attachment.original_name.rsplit(".", 1)[0],
                "extracted": "{}",
            }
        )
    return {
        "attachment": attachment,
        "profile": profile,
        "recognised": recognised,
        "rows": _rows(profile.extracted) if profile and recognised else [],
        "display_name": display_name(attachment),
        "suggested_name": suggested_name(attachment),
        "is_image": getattr(attachment, "kind", "pdf") == "image",
        "form": form,
        "notebook": attachment.note.notebook,
        # Owners and editors correct the profile and choose the name (the POST views check it).
        "can_edit": role_allows(
            notebook_role(user=user, notebook=attachment.note.notebook), Role.EDITOR
        ),
    }


@login_required
@require_http_methods(["GET"])
def source_view(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    """Full-screen split view: the document and its profile."""
    attachment = selectors.source_get(user=request.user, attachment_id=attachment_id)
    return render(request, "intelligence/split.html", _context(attachment, request.user))


@login_required
@require_http_methods(["POST"])
def profile_edit(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    """The owner corrects type, name and data: all validated first, then written at once."""
    attachment = selectors.source_get(
        user=request.user, attachment_id=attachment_id, role=Role.EDITOR
    )
    profile = selectors.profile_of(attachment)
    if profile is None:
        raise Http404
    form = ProfileForm(request.POST)
    if form.is_valid():
        try:
            services.profile_edit(
                profile=profile,
                doc_type=form.cleaned_data["doc_type"],
                better_name=form.cleaned_data["better_name"],
                extracted=form.cleaned_data["extracted"],
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            return redirect("intelligence:source", attachment_id=attachment.pk)
    return render(
        request, "intelligence/split.html", _context(attachment, request.user, form), status=400
    )


@login_required
@require_http_methods(["POST"])
def profile_name(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    """Accept the suggested file name (`accept=1`) or go back to the uploaded one (`accept=0`):
    an explicit choice; downloads keep the user's file name until it is made."""
    attachment = selectors.source_get(
        user=request.user, attachment_id=attachment_id, role=Role.EDITOR
    )
    profile = selectors.profile_of(attachment)
    if profile is None:
        raise Http404
    choice = request.POST.get("accept")
    try:
        if choice not in ("0", "1"):
            raise ValidationError(gettext("Choose whether to use the suggested name."))
        services.profile_name_accept(profile=profile, accepted=choice == "1")
    except ValidationError as exc:
        context = {**_context(attachment, request.user), "name_error": " ".join(exc.messages)}
        return render(request, "intelligence/split.html", context, status=400)
    return redirect("intelligence:source", attachment_id=attachment.pk)
