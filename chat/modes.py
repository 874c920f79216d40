"""Answer modes: how many passages an answer draws on and how it is written.

- exploring (default): 8 passages spread over the documents; suggests related topics.
- research: 4 passages, only strong ones; every claim cited; uncertainty flagged.
- learning: 6 passages; terms defined first, step by step, ends with a question that checks
  understanding.

The chat model gets a mode-specific clause in its system prompt; the offline answerer follows
the mode in how many passages and sentences it uses and what it suggests next (chat.extractive).
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
    sentence_floor: float  # offline: sentences scoring below this share of the best are left out
    max_sentences: int  # offline: sentences quoted
    prompt: str  # the chat model's clause


MODES: dict[str, ModeSpec] = {
    "exploring": ModeSpec(
        "exploring",
        _("Exploring"),
        _("A broad look across your sources, with related topics to follow"),
        top_k=8,
        diversity=True,
        sentence_floor=0.75,
        max_sentences=3,
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
        sentence_floor=0.85,
        max_sentences=3,
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
        sentence_floor=0.7,
        max_sentences=4,
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
