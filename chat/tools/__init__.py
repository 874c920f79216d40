"""The tool registry: a tool is a name, a description, a pydantic argument model and a handler
that receives the chat context. `tools_for(context)` builds the list for one chat (like
`buildToolsForChat`); `openai_tools` turns it into the chat completions `tools` parameter.

Handlers re-authorize every id against `context.user`: whatever arguments a model invents, a
tool answers only from what that user may see (another user's id reads as "not found").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from chat.events import Event, ToolActivity
from search.retrieval import Scope

if TYPE_CHECKING:
    from chat.models import Conversation
    from chat.selection import SourceSet
    from core.types import User
    from notes.models import Note, Notebook


@dataclass(frozen=True)
class AnswerRequest:
    """One question's request, built once before anyone answers (chat.agent): who asks, where,
    how, and what retrieval searches for it. Immutable: no stage changes what another stage
    reads. Two lists are the answer's running record and do change while it is written:
    `sources` (the passages the tools returned, numbered for [n] citations by `add_source`)
    and `notices` (how retrieval fell short, shown with the answer)."""

    user: User
    notebook: Notebook
    note: Note | None = None  # set: the chat is about this note's PDFs only
    conversation: Conversation | None = None
    # Continuing an answer that was cut short: what it says so far (the answerer writes on).
    continuing: str = ""
    # How to answer: exploring | research | learning (chat.modes).
    mode: str = "exploring"
    # What retrieval searches for the question: itself, or the chat model's rewrite when it
    # follows up an earlier one (chat.reformulation); offline, a follow-up is searched as
    # asked with the turn before as the context of its vector query (`context_vector`, see
    # search.retrieval.in_context); and the documents whose passages get the follow-up boost
    # (source anchoring), as attachment ids.
    search_query: str = ""
    search_focus: str = ""  # what the offline answer weighs sentences against: search_query
    context_vector: tuple[float, ...] | None = None
    context_text: str = ""  # the turn before's words, one more lexical leg of the search
    anchors: tuple[int, ...] = ()
    anchor_pages: tuple[tuple[int, int], ...] = ()  # (attachment id, page)
    # A follow-up's previous answer: the sentences it quoted (whitespace collapsed).
    said: frozenset[str] = frozenset()
    # Context slots filled before answering: memories of this notebook (chat.memory) and
    # summaries of compacted older turns (chat.compaction), as plain text.
    memories: tuple[str, ...] = ()
    summaries: tuple[str, ...] = ()
    # "Ask this PDF": the chat is about this one file (its note is `note`).
    attachment_id: int | None = None
    # The sources the user chose for this question (chips, ticked boxes, carry-over, minus
    # what they deselected; chat.selection), or None: the chat's own scope.
    selection: SourceSet | None = None
    # The answer's running record (the class docstring): the only mutable parts.
    sources: list[dict[str, Any]] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def scope(self, *, documents: bool = True, notes: bool = True) -> Scope:
        """What the tools search: the chosen sources when the user chose, else the chat's
        own scope (its one PDF, its note's PDFs, or its notebook's PDFs and notes). Either
        way search filters it by the user in SQL."""

        if self.selection is not None:
            return Scope(
                attachment_ids=sorted(self.selection.attachments),
                note_ids=sorted(self.selection.notes),
                include_documents=documents,
                include_notes=notes,
            )
        if self.attachment_id is not None:
            return Scope(notebook_id=self.notebook.pk, note_id=self.note.pk if self.note else None,
                         attachment_ids=[self.attachment_id], include_notes=False,
                         include_documents=documents)  # fmt: skip
        return Scope(
            notebook_id=self.notebook.pk,
            note_id=self.note.pk if self.note else None,
            include_notes=notes and self.note is None,
            include_documents=documents,
        )

    @property
    def notes_in_scope(self) -> bool:
        """Whether notes can be sources: a notebook chat, or a selection that names notes."""
        if self.selection is not None:
            return bool(self.selection.notes)
        return self.note is None and self.attachment_id is None

    def add_source(self, source: dict[str, Any]) -> int:
        """The citation number of a passage (the same passage keeps its number)."""
        key = (source["kind"], source["id"])
        for n, known in enumerate(self.sources, start=1):
            if (known["kind"], known["id"]) == key:
                return n
        self.sources.append(source)
        return len(self.sources)


@dataclass
class ToolResult:
    """What the model reads (`content`, untrusted source text marked as such), what the page
    shows while the agent works (`summary`), and the passages for citations (`passages`)."""

    content: str
    summary: str
    passages: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args: type[BaseModel]
    handler: Callable[[AnswerRequest, Any], ToolResult]
    # Whether the tool makes sense in a context (e.g. note tools need a notebook with notes).
    available: Callable[[AnswerRequest], bool] = lambda context: True
    # The arguments offered in a context, when narrower than `args` (no note_id in a chat
    # about one note: small models fill every parameter they see, with junk if need be).
    scoped_args: Callable[[AnswerRequest], type[BaseModel]] | None = None

    def arguments(self, context: AnswerRequest) -> type[BaseModel]:
        return self.scoped_args(context) if self.scoped_args else self.args

    def run(self, context: AnswerRequest, raw_arguments: str | dict[str, Any]) -> ToolResult:
        """Validate the model's arguments and run; bad arguments become a message the model
        can act on, never an exception. Arguments outside the context's model are ignored."""
        model = self.arguments(context)
        try:
            if isinstance(raw_arguments, str):
                args = model.model_validate_json(raw_arguments or "{}")
            else:
                args = model.model_validate(raw_arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
            )
            return ToolResult(f"Invalid arguments for {self.name}: {problems}", "Bad tool call")
        return self.handler(context, args)


REGISTRY: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    REGISTRY[tool.name] = tool
    return tool


def tools_for(context: AnswerRequest) -> list[Tool]:
    from chat.tools import builtin  # noqa: F401  (registers the built-in tools)

    return [tool for tool in REGISTRY.values() if tool.available(context)]


def openai_tools(tools: list[Tool], context: AnswerRequest) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.arguments(context).model_json_schema(),
            },
        }
        for tool in tools
    ]


def search_first(question: str, context: AnswerRequest) -> Generator[Event, None, list[ToolResult]]:
    """Retrieval before anyone writes: `document_search` with the question, or the search its
    reformulation made of it (`context.search_query`), for as many passages as the mode takes
    (and `note_search` in a notebook chat), through the chat's tool registry; yields the tool
    activity and returns the results (their passages numbered in `context.sources`)."""
    from chat.modes import spec  # not at import: chat.modes reads chat.models

    tools = {tool.name: tool for tool in tools_for(context)}
    query = context.search_query or question
    searches: list[tuple[str, dict[str, Any]]] = [
        ("document_search", {"query": query, "limit": spec(context.mode).top_k})
    ]
    if "note_search" in tools:
        searches.append(("note_search", {"query": query}))
    results = []
    for name, arguments in searches:
        started = time.perf_counter()
        result = tools[name].run(context, arguments)
        seconds = time.perf_counter() - started
        results.append(result)
        yield ToolActivity(name, arguments, result.summary, seconds, len(result.passages))
    return results
