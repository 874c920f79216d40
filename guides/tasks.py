"""django-q2 entry points: thin, take ids, call one service."""

from __future__ import annotations

from guides import services


def write_guide(guide_id: int | str, token: int | str) -> None:
    """Write one guide, if `token` is still its current one (else a newer run has it)."""
    services.guide_write(guide_id=int(guide_id), token=int(token))
