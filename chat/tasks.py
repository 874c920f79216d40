"""django-q2 entry points: thin, call one service."""

from __future__ import annotations

from chat import services


def interrupt_abandoned_answers() -> int:
    """Periodic: answers left pending or streaming by a web process that died become
    interrupted (with Retry) instead of "still being written" forever."""
    return services.message_interrupt_abandoned()
