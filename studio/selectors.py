"""Reads of Studio outputs, always through the notebooks `user` may see (another user's
output answers Http404, like a missing one). Members of a shared notebook see its outputs,
with who made them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from notes.selectors import notebook_get, notebook_list
from studio.models import StudioOutput

if TYPE_CHECKING:
    from core.types import User


def _visible(*, user: User) -> QuerySet[StudioOutput]:
    notebooks = notebook_list(user=user).values("pk")
    return StudioOutput.objects.filter(notebook__in=notebooks).select_related(
        "notebook", "created_by"
    )


def output_list(*, user: User, notebook_id: int) -> QuerySet[StudioOutput]:
    """The outputs of one visible notebook, newest first (Http404 for another's)."""
    notebook = notebook_get(user=user, notebook_id=notebook_id)
    return _visible(user=user).filter(notebook=notebook)


def output_get(*, user: User, output_id: int) -> StudioOutput:
    return get_object_or_404(_visible(user=user), pk=output_id)
