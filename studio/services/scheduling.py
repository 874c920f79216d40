"""Asking for Studio outputs: create, regenerate, cancel, rename, delete; queueing (fenced by
the output's token, as fair per-user jobs: core.jobs) and what the reaper (core.fencing) does
with outputs whose run was lost."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone
from django.utils.translation import get_language
from django.utils.translation import gettext as _

from chat.selection import excluded_sources, folder_sources, parse, resolve_all
from core.fencing import FencedKind, queue_safely
from core.jobs import job_submit
from notes.models import Notebook, Role
from notes.selectors import notebook_check, notebook_get
from studio import selectors
from studio.models import StudioOutput

if TYPE_CHECKING:
    from core.types import User

logger = logging.getLogger(__name__)
Status = StudioOutput.Status
TASK = "studio.tasks.write_output"
MAX_TITLE = 200
# Outputs one notebook keeps; beyond it a new one is refused until some are deleted.
MAX_PER_NOTEBOOK = 200


def scope_refs(
    *, user: User, notebook: Notebook, selections: object, excluded: object
) -> list[str]:
    """The sources an output is written from, as refs: the chips' sources (or, with none,
    every source of the notebook) minus the excluded ones (unticked boxes, removed chips),
    each checked against the user (chat.selection). [] means the whole notebook, read when
    the output is written. ValidationError when a chip names a source the user cannot use
    or everything was excluded."""
    chips = parse(selections, excluded)
    chosen = {ref for found in resolve_all(user=user, chips=chips) for ref in found.source_ids}
    singles = {chip.ref for chip in chips.chips if chip.ref.partition(":")[0] != "notebook"}
    left_out = excluded_sources(user=user, refs=chips.excluded, chosen=singles)
    if not chosen and not left_out:
        return []
    mine = set(folder_sources(notebook.pk, "all"))
    refs = sorted(((chosen & mine) if chosen else mine) - left_out)
    if not refs:
        raise ValidationError(
            _("No source is chosen: tick at least one source of this notebook."), code="scope"
        )
    return refs


def _queue(output: StudioOutput) -> None:
    pk, token = output.pk, output.token
    transaction.on_commit(lambda: queue_safely(enqueue_output, pk, token, what="a studio run"))


def enqueue_output(output_id: int, token: int) -> None:
    """One run for this token, as the job of whoever asked for it (fair per user)."""
    user_id = (
        StudioOutput.objects.filter(pk=output_id).values_list("created_by_id", flat=True).first()
    )
    job_submit(TASK, output_id, token, user_id=user_id, group="studio")


def output_create(
    *,
    user: User,
    notebook_id: int,
    kind: str,
    selections: object = None,
    excluded: object = None,
    title: str = "",
) -> StudioOutput:
    """A new output of `kind`, queued. Needs an editor's role (it is kept with the notebook)."""
    notebook = notebook_get(user=user, notebook_id=notebook_id, role=Role.EDITOR)
    if kind not in StudioOutput.Kind.values:
        raise ValidationError(_("Unknown kind of output."), code="kind")
    refs = scope_refs(user=user, notebook=notebook, selections=selections, excluded=excluded)
    with transaction.atomic():
        Notebook.objects.select_for_update().filter(pk=notebook.pk).first()
        if StudioOutput.objects.filter(notebook=notebook).count() >= MAX_PER_NOTEBOOK:
            raise ValidationError(
                _("This notebook keeps %(n)s Studio outputs already: delete some first.")
                % {"n": MAX_PER_NOTEBOOK},
                code="limit",
            )
        output = StudioOutput.objects.create(
            notebook=notebook,
            created_by=user,
            kind=kind,
            title=" ".join(title.split())[:MAX_TITLE],
            scope=refs,
            language=get_language() or "",
            token=1,
            requested_at=timezone.now(),
        )
        _queue(output)
    return output


def _editable(*, user: User, output_id: int) -> StudioOutput:
    output = selectors.output_get(user=user, output_id=output_id)
    notebook_check(user=user, notebook=output.notebook, role=Role.EDITOR)
    return output


def output_regenerate(*, user: User, output_id: int) -> StudioOutput:
    """Write it again from the sources as they are now (a run on its way is fenced off)."""
    output = _editable(user=user, output_id=output_id)
    with transaction.atomic():
        StudioOutput.objects.filter(pk=output.pk).update(
            token=F("token") + 1, status=Status.PENDING, attempts=0, progress=0, stage="",
            error="", requested_at=timezone.now(), heartbeat_at=None,
            language=get_language() or output.language,
        )  # fmt: skip
        output.refresh_from_db()
        _queue(output)
    return output


def output_cancel(*, user: User, output_id: int) -> StudioOutput:
    """Stop a run on its way: its token is bumped, so it writes nothing more. A finished
    output is left as it is."""
    output = _editable(user=user, output_id=output_id)
    StudioOutput.objects.filter(
        pk=output.pk, status__in=[Status.PENDING, Status.PROCESSING]
    ).update(token=F("token") + 1, status=Status.CANCELLED, stage="", heartbeat_at=None)
    output.refresh_from_db()
    return output


def output_rename(*, user: User, output_id: int, title: str) -> StudioOutput:
    output = _editable(user=user, output_id=output_id)
    title = " ".join(str(title).split())
    if not title:
        raise ValidationError(_("A title cannot be empty."), code="title")
    if len(title) > MAX_TITLE:
        raise ValidationError(
            _("A title has at most %(n)s characters.") % {"n": MAX_TITLE}, code="title"
        )
    StudioOutput.objects.filter(pk=output.pk).update(title=title)
    output.refresh_from_db()
    return output


def output_delete(*, user: User, output_id: int) -> None:
    output = _editable(user=user, output_id=output_id)
    output.delete()  # a run on its way finds no row to write to


# --- The reaper's view of outputs (core.fencing; registered in StudioConfig.ready())


def _stale(cutoff: datetime) -> QuerySet[StudioOutput]:
    return StudioOutput.objects.filter(status=Status.PROCESSING, heartbeat_at__lt=cutoff)


def _lost(cutoff: datetime) -> QuerySet[StudioOutput]:
    return StudioOutput.objects.filter(status=Status.PENDING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, requested_at__lt=cutoff)
    )


def _enqueue(output: Any) -> None:
    queue_safely(enqueue_output, output.pk, output.token, what="a studio run")


STUDIO = FencedKind(
    name="studio",
    stale=_stale,
    lost=_lost,
    fail_error="Writing this output stopped {attempts} times without finishing.",
    enqueue=_enqueue,
    token_fenced=True,
)
