"""Answer modes: how many passages an answer draws on and how it is written.

- exploring (default): 8 passages spread over the documents; suggests related topics.
- research: 4 passages, only strong ones; every claim cited; uncertainty flagged.
- learning: 6 passages; terms defined first, step by step, ends with a question that checks
  understanding.

The chat model gets a mode-specific clause in its system prompt; the offline answerer follows
the mode in how many passages it weighs (chat.extractive).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from chat.models import Mode

DEFAULT = Mode.EXPLORING.value


@dataclass(frozen=True)
class ModeSpec:
    name: str
    label: str | Promise  # shown (translated lazily)
    help: str | Promise
    top_k: int  # passages document_search brings before anyone writes
    diversity: bool  # spread the passages over documents
    prompt: str  # the chat model's clause


MODES: dict[str, ModeSpec] = {
    "exploring": ModeSpec(
        "exploring",
        _("Exploring"),
        _("A broad look across your sources, with related topics to follow"),
        top_k=8,
        diversity=True,
        prompt=(
            "Mode: exploring. Give a broad answer that draws on several sources where they "
            "help, and end with one line suggesting a related topic the sources cover."
        ),
    ),
    "research": ModeSpec(
        "research",
        _("Research"),
        _("Only strong passages, every claim cited, uncertainty flagged"),
        top_k=4,
        diversity=False,
        prompt=(
            "Mode: research. Be precise: every sentence must cite a source. Use only passages "
            "that clearly support a claim, and say explicitly where the sources are uncertain, "
            "incomplete or disagree."
        ),
    ),
    "learning": ModeSpec(
        "learning",
        _("Learning"),
        _("Defines terms first, explains step by step, then checks understanding"),
        top_k=6,
        diversity=False,
        prompt=(
            "Mode: learning. First define the key terms the answer needs, then explain step "
            "by step, citing sources; end with one short question the reader can answer to "
            "check their understanding."
        ),
    ),
}


def spec(mode: str | None) -> ModeSpec:
    return MODES.get(mode or DEFAULT, MODES[DEFAULT])


def valid(mode: str) -> bool:
    return mode in MODES
