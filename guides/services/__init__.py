"""Guide services: `scheduling` (requests, hooks, queueing, the reaper), `writing` (one run in
a worker), `content` (what an offline guide says), `model` (what a chat model says, verified).
Callers import from here."""

from guides.services.scheduling import (
    GUIDES,
    guide_request_notebook,
    guide_request_source,
    guides_after_delete,
    guides_after_ready,
    guides_after_reprocess,
    notebook_guide_ensure,
    source_guide_ensure,
)
from guides.services.writing import guide_write

__all__ = [
    "GUIDES",
    "guide_request_notebook",
    "guide_request_source",
    "guide_write",
    "guides_after_delete",
    "guides_after_ready",
    "guides_after_reprocess",
    "notebook_guide_ensure",
    "source_guide_ensure",
]
