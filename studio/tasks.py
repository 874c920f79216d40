"""django-q2 entry points: thin, take ids, call one service."""

from __future__ import annotations

from studio import services


def write_output(output_id: int | str, token: int | str) -> None:
    """Write one Studio output, if `token` is still its current one."""
    services.output_write(output_id=int(output_id), token=int(token))


def speak_output(output_id: int | str, token: int | str) -> None:
    """The next slice of an audio overview's speech, if `token` is still its current one."""
    services.output_speak(output_id=int(output_id), token=int(token))
