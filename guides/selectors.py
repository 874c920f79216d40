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


def source_guide_get(*, user: User, attachment_id: int) -> SourceGuide:
    """The guide of one visible attachment (None before one was asked for). A read only:
    `guides.services.source_guide_ensure` also asks for a missing or stale one."""
    attachment = attachment_get(user=user, attachment_id=attachment_id)
    return SourceGuide(attachment, Guide.objects.filter(attachment=attachment).first())


def notebook_guide_get(*, user: User, notebook_id: int) -> NotebookGuide:
    """The guide of one visible notebook (None before one was asked for). A read only:
    `guides.services.notebook_guide_ensure` also asks for it again when its sources changed."""
    notebook = notebook_get(user=user, notebook_id=notebook_id)
    guide = Guide.objects.filter(kind=Guide.Kind.NOTEBOOK, notebook=notebook).first()
    return NotebookGuide(notebook, guide)
