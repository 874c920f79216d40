"""One run of a Studio output as its worker sees it: the heartbeat that reports progress and
stops the run once the row is no longer its own (its token bumped by a cancel or a regenerate,
or the row deleted), and the fenced final write."""

from __future__ import annotations

import time
from typing import Any

from django.utils import timezone

from studio.models import StudioOutput

Status = StudioOutput.Status


class Superseded(Exception):
    """The output was cancelled, asked for again or deleted: this run must stop writing."""


class Run:
    """`carry_on`: this run continues an earlier one of the same token (an audio overview is
    spoken in slices, each its own job): its timings go on from where that one's stopped."""

    def __init__(self, output: StudioOutput, *, carry_on: bool = False) -> None:
        self.output = output
        self.token = output.token
        carried = output.timings if carry_on and isinstance(output.timings, dict) else {}
        self.timings: dict[str, float] = dict(carried)
        self._started = time.monotonic() - float(carried.get("total", 0.0))
        self._last = 0.0

    def _rows(self) -> Any:
        return StudioOutput.objects.filter(
            pk=self.output.pk, token=self.token, status=Status.PROCESSING
        )

    def beat(self, stage: str, percent: int) -> None:
        """Say the run is alive and how far it got; stop if it no longer owns the row."""
        now = time.monotonic()
        self.timings[stage] = round(now - self._started, 3)
        fields: dict[str, Any] = {"heartbeat_at": timezone.now()}
        if now - self._last >= 0.5 or percent >= 90:  # progress at most twice a second
            fields.update(progress=max(0, min(99, percent)), stage=stage[:40])
            self._last = now
        if not self._rows().update(**fields):
            raise Superseded

    def save(self, **fields: Any) -> None:
        """Write `fields` (and the timings so far) while the run still owns the row."""
        self.timings["total"] = round(time.monotonic() - self._started, 3)
        if not self._rows().update(timings=self.timings, heartbeat_at=timezone.now(), **fields):
            raise Superseded

    def end(self, **fields: Any) -> None:
        """The last write of the run (the status it ends in among `fields`)."""
        self.save(**fields)
