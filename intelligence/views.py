"""The split view of one source (document left, extracted data right) and the owner's edits."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods

from attachments.models import NoteAttachment
from attachments.naming import display_name
from core.types import AuthenticatedHttpRequest
from intelligence import selectors, services
from intelligence.models import SourceProfile
from notes.models import Role


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


def _context(attachment: NoteAttachment, form: ProfileForm | None = None) -> dict[str, Any]:
    profile = selectors.profile_of(attachment)
    if form is None and profile is not None:
        form = ProfileForm(
            initial={
                "doc_type": profile.doc_type,
                "better_name": profile.better_name,
                "extracted": json.dumps(profile.extracted, indent=2, ensure_ascii=False),
            }
        )
    return {
        "attachment": attachment,
        "profile": profile,
        "rows": _rows(profile.extracted) if profile else [],
        "display_name": display_name(attachment),
        "is_image": getattr(attachment, "kind", "pdf") == "image",
        "form": form,
        "notebook": attachment.note.notebook,
    }


@login_required
@require_http_methods(["GET"])
def source_view(request: AuthenticatedHttpRequest, attachment_id: int) -> HttpResponse:
    """Full-screen split view: the document and its profile."""
    attachment = selectors.source_get(user=request.user, attachment_id=attachment_id)
    return render(request, "intelligence/split.html", _context(attachment))


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
    return render(request, "intelligence/split.html", _context(attachment, form), status=400)
