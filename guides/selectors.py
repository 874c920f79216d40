"""Reads of guides, always through the attachments and notebooks `user` may see (another
user's answers Http404, like a missing one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attachments.models import NoteAttachment
from attachments.selectors import attachment_get
from guides.models import Guide
from notes.models import Notebook
from notes.selectors import notebook_get

if TYPE_CHECKING:
    from core.types import User


@dataclass
class SourceGuide:
    attachment: NoteAttachment
    guide: Guide | None


@dataclass
class NotebookGuide:
    notebook: Notebook
    guide: Guide | None


def source_guide_get(*, user: User, attachment_id: int, ensure: bool = True) -> SourceGuide:
    """The guide of one visible attachment (None before one was asked for). With `ensure`,
    a ready PDF whose guide is missing or was written from an earlier processing (files
    ingested before guides existed, a lost request) gets it asked for."""
    attachment = attachment_get(user=user, attachment_id=attachment_id)
    guide = Guide.objects.filter(attachment=attachment).first()
    if ensure and attachment.status == NoteAttachment.Status.READY:
        from guides.services import guide_request_source

        guide = guide_request_source(attachment=attachment)
    return SourceGuide(attachment, guide)


def notebook_guide_get(*, user: User, notebook_id: int, ensure: bool = True) -> NotebookGuide:
    """The guide of one visible notebook; with `ensure`, asked for again when its sources
    changed since it was written (notes trashed or restored, anything a hook missed)."""
    notebook = notebook_get(user=user, notebook_id=notebook_id)
    guide = Guide.objects.filter(kind=Guide.Kind.NOTEBOOK, notebook=notebook).first()
    if ensure:
        from guides.services import guide_request_notebook

        guide = guide_request_notebook(notebook_id=notebook.pk)
    return NotebookGuide(notebook, guide)
