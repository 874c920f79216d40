"""Notes, conversations, guides and memories as Markdown files.

Citations become Markdown footnotes (`[^1]`) naming the file, the page and the exact quote,
numbered through the whole file: a conversation's second answer goes on where the first
stopped. Only verified citations become footnotes (chat.rendering.sources, what the page
shows as chips); any other `[n]` stays as the model wrote it. Front matter is YAML written by
PyYAML, so a title holding quotes, colons or newlines stays one value."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import yaml
from django.utils.translation import gettext as _

from chat.claims import clean
from chat.models import Conversation, Memory, Message
from chat.rendering import Source, page_label, sources
from grounding.citations import MARKER
from guides.models import Guide
from guides.services.content import shown
from notes.models import Note

# Code spans and fenced blocks keep their brackets: `[1]` in code is code.
_CODE = re.compile(r"(```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)|`[^`\n]*`)", re.DOTALL)


def front_matter(fields: dict[str, Any]) -> str:
    dumped = yaml.safe_dump(fields, allow_unicode=True, sort_keys=False, width=1000)
    return f"---\n{dumped}---\n\n"


def _stamp(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="seconds") if moment else None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class Footnotes:
    """The footnotes of one Markdown file, numbered in order of first use."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._flushed = 0

    def add(self, where: str, quote: str) -> str:
        """A new footnote; returns its marker `[^n]`. The quote keeps its line breaks, each
        continued line indented so that it stays inside the footnote."""
        n = len(self.lines) + 1
        text = _one_line(where)
        if quote:
            text += ": “" + quote.strip().replace("\n", "\n    ") + "”"
        self.lines.append(f"[^{n}]: {text}")
        return f"[^{n}]"

    def flush(self) -> str:
        """The definitions added since the last flush, as a block (or "")."""
        block = "\n".join(self.lines[self._flushed :])
        self._flushed = len(self.lines)
        return f"\n\n{block}" if block else ""


def _where(source: Source) -> str:
    return page_label(source.label, source.page, source.where)


def _cite(text: str, shown_sources: list[Source], notes: Footnotes) -> str:
    """`[n]` markers outside code → footnotes; the k-th [n] gets n's k-th quote, as on the
    page (chat.rendering._ChipWriter)."""
    by_n: dict[int, list[Source]] = {}
    for source in shown_sources:
        by_n.setdefault(source.n, []).append(source)
    seen: dict[int, int] = {}

    def replace(match: re.Match[str]) -> str:
        n = int(match.group(1))
        quotes = by_n.get(n)
        if not quotes:
            return match.group(0)
        source = quotes[min(seen.get(n, 0), len(quotes) - 1)]
        seen[n] = seen.get(n, 0) + 1
        return notes.add(_where(source), source.quote)

    parts = _CODE.split(text)
    return "".join(part if i % 2 else MARKER.sub(replace, part) for i, part in enumerate(parts))


def note_markdown(note: Note) -> str:
    """A note: YAML front matter (title, created, updated, author), then its body as it is."""
    author = note.author.get_username() if note.author else None
    fields = {
        "title": note.title,
        "created": _stamp(note.created_at),
        "updated": _stamp(note.updated_at),
        "author": author,
    }
    if note.trashed_at:
        fields["trashed"] = _stamp(note.trashed_at)
    return front_matter(fields) + note.body


def _answer(message: Message, notes: Footnotes) -> str:
    if message.status in (Message.Status.PENDING, Message.Status.STREAMING):
        return f"*{_('This answer was still being written when the export was made.')}*"
    if message.status != Message.Status.COMPLETE:
        reason = _one_line(message.error) or _("The answer could not be written.")
        return f"*{_('No answer')}: {reason}*"
    return _cite(clean(message.content), sources(message), notes).strip()


def conversation_markdown(conversation: Conversation, messages: Iterable[Message]) -> str:
    """A conversation: front matter, then each question and its answer with footnotes."""
    scope: dict[str, Any] = {"notebook": conversation.notebook.title}
    if conversation.note_id and conversation.note:
        scope["note"] = conversation.note.title
    if conversation.attachment_id and conversation.attachment:
        scope["source"] = conversation.attachment.original_name
    fields = {
        "title": conversation.title,
        **scope,
        "mode": conversation.mode,
        "created": _stamp(conversation.created_at),
        "updated": _stamp(conversation.updated_at),
    }
    notes = Footnotes()
    parts = [front_matter(fields) + f"# {_one_line(conversation.title)}"]
    for message in messages:
        when = _stamp(message.created_at)
        if message.role == Message.Role.USER:
            parts.append(f"## {_('Question')}\n\n*{when}*\n\n{message.content.strip()}")
        else:
            parts.append(f"### {_('Answer')}\n\n{_answer(message, notes)}{notes.flush()}")
    return "\n\n".join(parts) + "\n"


def _guide_citation(citation: dict[str, Any], notes: Footnotes) -> str:
    try:
        page = int(citation.get("page") or 0) or None
    except (TypeError, ValueError):
        page = None
    where = page_label(str(citation.get("file", "")), page, str(citation.get("where") or ""))
    return notes.add(where, str(citation.get("quote", "")))


def guide_markdown(guide: Guide, *, heading: str) -> str:
    """A notebook or source guide: summary (each sentence with its citations as footnotes),
    key topics, outline and suggested questions."""
    notes = Footnotes()
    fields = {
        "title": guide.title or heading,
        "kind": guide.kind,
        "written": _stamp(guide.ready_at),
        "generator": guide.generator,
    }
    if guide.model:
        fields["model"] = guide.model
    parts = [front_matter(fields) + f"# {_one_line(guide.title or heading)}"]
    summary = []
    for sentence in guide.summary or []:
        if not isinstance(sentence, dict):
            continue
        citations = [c for c in sentence.get("citations") or [] if isinstance(c, dict)]
        marks = "".join(_guide_citation(c, notes) for c in citations)
        text = _one_line(sentence.get("text", ""))
        summary.append(f"> “{text}”{marks}" if sentence.get("quoted") else f"{text}{marks}")
    if summary:
        parts.append(f"## {_('Summary')}\n\n" + "\n\n".join(summary))
    if guide.topics:
        topics = "\n".join(f"- {_one_line(t)}" for t in guide.topics)
        parts.append(f"## {_('Key topics')}\n\n{topics}")
    outline = []
    for entry in guide.outline or []:
        if not isinstance(entry, dict):
            continue
        depth = max(0, min(int(entry.get("level") or 1), 6) - 1)
        where = page_label(str(entry.get("file", "")), entry.get("page"))
        outline.append(f"{'  ' * depth}- {_one_line(entry.get('text', ''))} ({where})")
    if outline:
        parts.append(f"## {_('Outline')}\n\n" + "\n".join(outline))
    questions = [f"- {_one_line(shown(q))}" for q in guide.questions or [] if isinstance(q, dict)]
    if questions:
        parts.append(f"## {_('Questions to ask')}\n\n" + "\n".join(questions))
    return "\n\n".join(parts) + notes.flush() + "\n"


def memories_markdown(notebook_title: str, memories: Iterable[Memory]) -> str:
    """What the user's chats in one notebook remember, most important first."""
    lines = [
        f"- **{memory.get_kind_display()}** ({memory.importance:.2f}): {_one_line(memory.text)}"
        for memory in memories
    ]
    heading = _("Memories of “%(title)s”") % {"title": _one_line(notebook_title)}
    return f"# {heading}\n\n" + "\n".join(lines) + "\n"
