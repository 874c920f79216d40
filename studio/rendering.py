"""A Studio output as the page shows it: each statement's [n] markers become the same citation
chips as a chat answer's (chat.rendering: a click opens the source at the page with the
quote highlighted), over text that is escaped first when it is a quote (source text is shown
as text, never as markup) and sanitised Markdown when it is an answer the chat wrote."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from django.utils import formats
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from chat.models import Message
from chat.passages import escape
from chat.rendering import Source, answer_html, sources
from guides.services.content import TEMPLATES
from studio.models import StudioOutput


@dataclass
class Shown:
    """What the output page needs: its citations as Sources and a renderer for statements."""

    output: StudioOutput
    citations: list[dict[str, Any]] = field(default_factory=list)
    _count: int = 0

    def __post_init__(self) -> None:
        content = self.output.content if isinstance(self.output.content, dict) else {}
        self.citations = [c for c in content.get("citations") or [] if isinstance(c, dict)]
        self.sources: list[Source] = sources(self._message(""))

    def _message(self, text: str, *, highlight: bool = False) -> Message:
        # An unsaved message carries the statement through chat's rendering; its pk only keys
        # the ids of the citation cards (unique on the page).
        self._count += 1
        return Message(pk=self._count, content=text, citations=self.citations, metadata={},
                       answerer="extractive" if highlight else "studio")  # fmt: skip

    def html(self, item: dict[str, Any], key: str = "text") -> SafeString:
        text = str(item.get(key) or "")
        markdown = bool(item.get("markdown")) if key in ("text", "back") else False
        return answer_html(
            self._message(text if markdown else escape(text), highlight=markdown), self.sources
        )


def date_label(item: dict[str, Any]) -> str:
    """A timeline event's date as precise as the text gave it: 1852, March 1921, 3 March 1921."""
    try:
        when = date.fromisoformat(str(item.get("date", "")))
    except ValueError:
        return ""
    precision = item.get("precision")
    if precision == "year":
        return str(when.year)
    if precision == "month":
        return formats.date_format(when, "YEAR_MONTH_FORMAT")
    return formats.date_format(when, "DATE_FORMAT")


def ask_text(node: dict[str, Any], topic: bool) -> str:
    """What clicking a mind map node asks the chat, in the reader's language."""
    template = TEMPLATES["definition" if topic else "section"]
    return _(template) % {"subject": node.get("label", "")}


def stage_label(stage: str) -> str:
    """What a run is doing, in the reader's language (the worker saves the stage's name)."""
    labels = {
        "passages": _("Finding the central passages…"),
        "phrases": _("Finding the key phrases…"),
        "summary": _("Choosing the summary…"),
        "key points": _("Choosing the key points…"),
        "definitions": _("Looking for definitions…"),
        "answers": _("Answering the questions…"),
        "reading": _("Reading the sources…"),
        "dates": _("Looking for dates…"),
        "outline": _("Drawing the outline…"),
        "topics": _("Placing the key topics…"),
        "script": _("Writing the script…"),
        "writing": _("The chat model is writing…"),
        "speech": _("Speaking…"),
        "encoding": _("Making the audio file…"),
    }
    return labels.get(stage, _("Starting…"))


def clock(seconds: object) -> str:
    """Seconds as m:ss (h:mm:ss past an hour); "" for anything else."""
    if not isinstance(seconds, int | float) or seconds < 0:
        return ""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def speaker_label(line: dict[str, Any], *, conversation: bool) -> str:
    """Who says a line of an audio overview: two hosts in a conversation; offline, the host
    who frames it and the reader of the quotes."""
    second = line.get("speaker") == 1
    if conversation:
        return _("Host B") if second else _("Host A")
    return _("Reader") if second else _("Host")
