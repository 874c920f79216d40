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
from core.markdown import plain_text as plain_markdown
from grounding.citations import MARKER
from guides.models import Guide
from guides.services.content import shown
from notes.models import Note
from studio.models import StudioOutput
from studio.rendering import clock, speaker_label

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


# --- Studio outputs


def _studio_text(text: str, citations: dict[int, dict[str, Any]], notes: Footnotes) -> str:
    """A statement's [n] markers (outside code) as footnotes naming file, page and quote."""

    def replace(match: re.Match[str]) -> str:
        citation = citations.get(int(match.group(1)))
        if not citation:
            return ""
        if citation.get("kind") == "note":  # a note has no pages: its title says where
            return notes.add(str(citation.get("note_title", "")), str(citation.get("quote", "")))
        return _guide_citation(citation, notes)

    parts = _CODE.split(text)
    return "".join(part if i % 2 else MARKER.sub(replace, part) for i, part in enumerate(parts))


def _studio_node(node: dict[str, Any], citations: dict[int, dict[str, Any]], notes: Footnotes,
                 depth: int) -> list[str]:  # fmt: skip
    own = _studio_text(_one_line(node.get("text") or node.get("label", "")), citations, notes)
    lines = [f"{'  ' * depth}- {own}"]
    for child in node.get("children") or []:
        if isinstance(child, dict):
            lines += _studio_node(child, citations, notes, depth + 1)
    return lines


def studio_markdown(output: StudioOutput) -> str:
    """A Studio output: front matter, its sections and statements, each [n] a footnote with
    file, page and the exact quote; quotes as block quotes, answers as the chat wrote them."""
    content = output.content if isinstance(output.content, dict) else {}
    citations = {int(c["n"]): c for c in content.get("citations") or []
                 if isinstance(c, dict) and str(c.get("n", "")).isdigit()}  # fmt: skip
    fields = {
        "title": output.title,
        "kind": output.kind,
        "notebook": output.notebook.title,
        "made_by": output.created_by.get_username() if output.created_by else None,
        "written": _stamp(output.ready_at),
        "generator": output.generator,
    }
    if output.model:
        fields["model"] = output.model
    notes = Footnotes()
    parts = [front_matter(fields) + f"# {_one_line(output.title)}"]
    for section in content.get("sections") or []:
        lines = []
        for item in section.get("items") or []:
            if not isinstance(item, dict):
                continue
            if output.kind == StudioOutput.Kind.MIND_MAP:
                lines.append("\n".join(_studio_node(item, citations, notes, 0)))
                continue
            text = str(item.get("back") or item.get("text") or "")
            said = _studio_text(text if item.get("markdown") else _one_line(text), citations, notes)
            if output.kind == StudioOutput.Kind.AUDIO:  # who says it, and when
                who = speaker_label(item, conversation=bool(output.model))
                at = clock(item.get("start"))
                lines.append(f"**{f'[{at}] ' if at else ''}{who}:** {said}")
            elif output.kind == StudioOutput.Kind.QUIZ:
                options = item.get("options") or []
                answer = item.get("answer")
                listed = "\n".join(f"{'- [x]' if i == answer else '- [ ]'} {_one_line(o)}"
                                   for i, o in enumerate(options))  # fmt: skip
                lines.append(f"**{_one_line(item.get('question', ''))}**\n\n{listed}\n\n> {said}")
            elif item.get("question") or item.get("front"):
                asked = _one_line(item.get("question") or item.get("front") or "")
                lines.append(f"### {asked}\n\n{said if item.get('markdown') else '> ' + said}")
            elif item.get("term"):
                lines.append(f"**{_one_line(item['term'])}**: {said}")
            elif item.get("date"):
                lines.append(f"- **{item['date']}**: {said}")
            elif item.get("written"):  # a chat model's sentence, checked: not a quote
                lines.append(said)
            elif item.get("cited", True):
                lines.append(f"> {said}")
            else:
                lines.append(f"- {said}")
        if lines:
            parts.append(f"## {_one_line(section.get('heading', ''))}\n\n" + "\n\n".join(lines))
    return "\n\n".join(parts) + notes.flush() + "\n"


def studio_csv_rows(output: StudioOutput) -> list[list[str]]:
    """Flashcards or a quiz as (front, back) rows, as Anki imports them: plain text, the back
    naming the file and page of its quote."""
    content = output.content if isinstance(output.content, dict) else {}
    citations = {int(c["n"]): c for c in content.get("citations") or []
                 if isinstance(c, dict) and str(c.get("n", "")).isdigit()}  # fmt: skip
    rows = []
    for section in content.get("sections") or []:
        for item in section.get("items") or []:
            if not isinstance(item, dict):
                continue
            text = str(item.get("back") or item.get("text") or "")
            places = [citations[int(n)] for n in MARKER.findall(text) if int(n) in citations]
            plain = _one_line(
                MARKER.sub("", plain_markdown(text) if item.get("markdown") else text)
            )
            where = "; ".join(
                page_label(
                    str(c.get("file") or c.get("note_title", "")),
                    c.get("page"),
                    str(c.get("where") or ""),
                )
                for c in places
            )
            back = f"{plain} ({where})" if where else plain
            if output.kind == StudioOutput.Kind.QUIZ:
                options = [str(o) for o in item.get("options") or []]
                front = (
                    _one_line(item.get("question", ""))
                    + "\n"
                    + "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options))
                )
                answer = item.get("answer")
                if isinstance(answer, int) and 0 <= answer < len(options):
                    back = f"{chr(65 + answer)}. {options[answer]} — {back}"
                rows.append([front, back])
            else:
                rows.append([_one_line(item.get("front", "")), back])
    return rows
