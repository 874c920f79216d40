"""The messages a chat model reads besides the sources: the system prompt for a chat, and
earlier turns as user/assistant pairs."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from django.http import Http404

from chat import prompts
from notes.models import Note
from notes.selectors import note_list

if TYPE_CHECKING:
    from chat.llm.budget import ChatMessage
    from chat.tools import AnswerRequest, Tool

NOTES_LISTED = 30  # notes named in the system prompt so that note_read can be used
CITATION = re.compile(r"\s*\[\d{1,3}\]")  # a [n] marker and the space before it


def history_messages(history: list[tuple[str, str]]) -> list[ChatMessage]:
    """Earlier questions with their answers, as user/assistant pairs (a question whose answer
    failed is left out). [n] markers are dropped: numbers are given afresh in each answer."""
    messages: list[ChatMessage] = []
    question: str | None = None
    for role, content in history:
        if role == "user":
            question = content.strip() or None
        elif role == "assistant" and question is not None:
            answer = CITATION.sub("", content).strip()
            if answer:
                messages += [
                    {"role": "user", "content": question},
                    {"role": "assistant", "content": answer},
                ]
            question = None
    return messages


def system_prompt(context: AnswerRequest, tools: dict[str, Tool], *, tools_offered: bool) -> str:
    notes: list[tuple[int, str]] = []
    if "note_read" in tools and tools_offered:
        try:
            visible = note_list(user=context.user, notebook_id=context.notebook.pk)
        except Http404:  # the notebook stopped being shared with this user
            visible = Note.objects.none()
        notes = list(visible.values_list("pk", "title")[:NOTES_LISTED])
    return prompts.answer_system(
        notebook=context.notebook.title,
        note=context.note.title if context.note is not None else None,
        notes=notes,
        tools=tools_offered,
        mode=context.mode,
        earlier=bool(context.memories or context.summaries),
    )
