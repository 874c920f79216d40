"""Studio's use cases: asking for outputs (scheduling) and writing them (writing)."""

from studio.services.audio import output_speak
from studio.services.scheduling import (
    output_cancel,
    output_create,
    output_delete,
    output_regenerate,
    output_rename,
)
from studio.services.writing import output_write

__all__ = [
    "output_cancel",
    "output_create",
    "output_delete",
    "output_regenerate",
    "output_rename",
    "output_speak",
    "output_write",
]
