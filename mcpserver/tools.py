"""What each MCP tool does, as plain synchronous functions of the user (and the token scope
they carry): the chat agent's tools (chat.tools registry: `document_search`, `note_search`,
`note_read`) run here in a context built from the arguments, `list_notebooks` reads
notes.selectors, and `ask` goes through chat's answering use case like the REST API.

Every id is checked through the selectors with `user`: another user's notebook, note or file
reads "not found", exactly like a missing one. A failure the caller can fix raises ToolFailure
with a message for the model to read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404
from django.urls import reverse
from django.utils.translation import gettext

from attachments.selectors import searchable_attachments
from chat import answering, runner
from chat import selectors as chat_selectors
from chat import services as chat_services
from chat.selection import SourceSet
from chat.tools import REGISTRY, AnswerRequest, ToolResult, tools_for
from core.ratelimit import RateLimited
from notes.models import Notebook
from notes.selectors import note_get, notebook_get, notebook_list, visible_notes

if TYPE_CHECKING:
    from core.types import User

# How long `ask` waits for its answer (the answer goes on being written and saved after that).
ASK_TIMEOUT_SECONDS = 300.0
TITLE_CHARS = 80


class ToolFailure(Exception):
    """A tool call the caller can correct (a missing id, a bad question): its message is what
    the MCP client's model reads."""


@dataclass(frozen=True)
class Caller:
    """Who calls (the token's user, its scope attached) and the site's address as this request
    reached it (for the links in results)."""

    user: User
    base_url: str

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"


def _notebook(caller: Caller, notebook_id: int) -> Notebook:
    try:
        return notebook_get(user=caller.user, notebook_id=notebook_id)
    except Http404:
        raise ToolFailure(f"No notebook {notebook_id}. list_notebooks lists yours.") from None


def _everything(caller: Caller) -> AnswerRequest:
    """A context over every notebook the caller may see: the chat tools then search the
    chosen sources, which are all of them (the notebook only stands beside the selection,
    which the tools read first)."""
    notebooks = list(notebook_list(user=caller.user).order_by("-updated_at")[:1])
    if not notebooks:
        raise ToolFailure("You have no notebooks this token may see.")
    sources = SourceSet(
        attachments=set(searchable_attachments(user=caller.user).values_list("pk", flat=True)),
        notes=set(
            visible_notes(user=caller.user)
            .filter(trashed_at__isnull=True)
            .values_list("pk", flat=True)
        ),
    )
    return AnswerRequest(user=caller.user, notebook=notebooks[0], selection=sources)


def _context(caller: Caller, notebook_id: int | None, note_id: int | None) -> AnswerRequest:
    """The chat context for a search: one notebook, a note's notebook, or everything."""
    if notebook_id is not None:
        return AnswerRequest(user=caller.user, notebook=_notebook(caller, notebook_id))
    if note_id is not None:
        try:
            note = note_get(user=caller.user, note_id=note_id, include_trashed=False)
        except Http404:
            raise ToolFailure(f"No note {note_id}.") from None
        return AnswerRequest(user=caller.user, notebook=note.notebook)
    return _everything(caller)


def _run(name: str, context: AnswerRequest, arguments: dict[str, Any]) -> ToolResult:
    tools = {tool.name: tool for tool in tools_for(context)}
    if name not in tools:  # the note tools, where there are no notes to be sources
        return ToolResult("No notes matched.", "")
    return REGISTRY[name].run(context, arguments)


def _passage(caller: Caller, passage: dict[str, Any]) -> dict[str, Any]:
    """A passage as MCP returns it: where it is, its text, and a link to open it."""
    keys = ("n", "kind", "note_id", "note_title")
    out: dict[str, Any] = {key: passage[key] for key in keys if key in passage}
    if passage["kind"] == "document":
        attachment_id = int(passage["attachment_id"])
        page = passage.get("page")
        out |= {
            "attachment_id": attachment_id,
            "file": passage.get("file", ""),
            "page": page,
            "heading": passage.get("heading", ""),
            "url": caller.url(reverse("attachments:download", args=[attachment_id]))
            + (f"#page={page}" if page else ""),
        }
    else:
        out["url"] = caller.url(reverse("attachments:note_detail", args=[passage["note_id"]]))
    out["text"] = passage.get("text", "")
    return out


def _found(caller: Caller, result: ToolResult, context: AnswerRequest) -> dict[str, Any]:
    if not result.passages and result.content.endswith("in this notebook."):
        raise ToolFailure(result.content)  # an id the context does not know
    return {
        "results": [_passage(caller, p) for p in result.passages],
        "notices": list(context.notices),
    }


def document_search(
    caller: Caller,
    *,
    query: str,
    notebook_id: int | None = None,
    note_id: int | None = None,
    limit: int = 5,
) -> dict[str, Any]:
    """Passages of the caller's documents matching `query` (in one notebook, one note's
    documents, or everywhere they may look)."""
    context = _context(caller, notebook_id, note_id)
    arguments: dict[str, Any] = {"query": query, "limit": limit}
    if note_id is not None:  # document_search checks that the note is in the context
        arguments["note_id"] = note_id
    result = _run("document_search", context, arguments)
    return _found(caller, result, context)


def note_search(caller: Caller, *, query: str, notebook_id: int | None = None) -> dict[str, Any]:
    """The caller's notes matching `query` (in one notebook or everywhere)."""
    context = _context(caller, notebook_id, None)
    return _found(caller, _run("note_search", context, {"query": query}), context)


def note_read(caller: Caller, *, note_id: int) -> dict[str, Any]:
    """One whole note of the caller's (not in the trash)."""
    context = _context(caller, None, note_id)
    result = _run("note_read", context, {"note_id": note_id})
    if not result.passages:
        raise ToolFailure(f"No note {note_id}.")
    passage = result.passages[0]
    note = note_get(user=caller.user, note_id=note_id, include_trashed=False)
    return {
        "note_id": note.pk,
        "notebook_id": note.notebook_id,
        "title": note.title,
        "body": note.body,
        "updated_at": note.updated_at.isoformat(),
        "url": _passage(caller, passage)["url"],
    }


def list_notebooks(caller: Caller) -> dict[str, Any]:
    """The notebooks the caller (through this token) may see, most recently changed first."""
    notebooks = notebook_list(user=caller.user).order_by("-updated_at", "-pk")
    return {
        "notebooks": [
            {
                "id": nb.pk,
                "title": nb.title,
                "description": nb.description,
                "note_count": nb.note_count,
                "updated_at": nb.updated_at.isoformat(),
                "url": caller.url(reverse("workspace:page", args=[nb.pk])),
            }
            for nb in notebooks
        ]
    }


def _citation(caller: Caller, citation: dict[str, Any]) -> dict[str, Any]:
    quote = str(citation.get("quote", ""))
    out: dict[str, Any] = {"n": citation.get("n"), "kind": citation.get("kind"), "quote": quote}
    if citation.get("kind") == "document":
        attachment_id = int(citation["attachment_id"])
        page = int(citation["page"])
        out |= {
            "attachment_id": attachment_id,
            "file": citation.get("file", ""),
            "page": page,
            "url": caller.url(reverse("attachments:download", args=[attachment_id]))
            + f"#page={page}",
            # The extracted text of that page with the quote marked.
            "text_url": caller.url(reverse("attachments:pages", args=[attachment_id]))
            + "?"
            + urlencode({"page": page, "quote": quote})
            + "#quote",
        }
    else:
        note_id = int(citation["note_id"])
        out |= {
            "note_id": note_id,
            "note_title": citation.get("note_title", ""),
            "url": caller.url(reverse("attachments:note_detail", args=[note_id])),
        }
    return out


def ask(caller: Caller, *, question: str, notebook_id: int | None = None) -> dict[str, Any]:
    """A cited answer to `question` from one notebook's sources, through the chat's answering
    path (the chat model, or offline the extractive answerer). It is kept in the caller's own
    chat history as a conversation titled after the question and marked as asked over MCP,
    which only they see: asking changes no notes or sources, so read-only tokens may ask."""
    if notebook_id is None:
        notebooks = list(notebook_list(user=caller.user)[:2])
        if len(notebooks) != 1:
            raise ToolFailure(
                "Say which notebook to ask (notebook_id): list_notebooks lists them."
                if notebooks
                else "You have no notebooks this token may see."
            )
        notebook: Notebook = notebooks[0]
    else:
        notebook = _notebook(caller, notebook_id)
    title = gettext("MCP: %(question)s") % {"question": " ".join(question.split())[:TITLE_CHARS]}
    listener = runner.Listener(timeout=ASK_TIMEOUT_SECONDS)
    try:
        # One transaction: a question refused (empty, too long, over the budget) leaves no
        # empty conversation behind; the answer starts when it commits.
        with transaction.atomic():
            conversation = chat_services.conversation_create(
                owner=caller.user, notebook=notebook, title=title
            )
            _question, answer = answering.ask(
                user=caller.user, conversation=conversation, content=question, also=listener
            )
    except ValidationError as exc:
        raise ToolFailure(" ".join(exc.messages)) from None
    except RateLimited as exc:
        raise ToolFailure(exc.message) from None
    for _event in listener.events(answer.pk):
        pass
    message = chat_selectors.message_get(user=caller.user, message_id=answer.pk)
    return {
        "answer": message.content,
        "status": message.status,
        "error": message.error,
        "answerer": message.answerer,
        "confidence": message.confidence,
        "citations": [_citation(caller, c) for c in message.citations or []],
        "notebook_id": notebook.pk,
        "conversation_url": caller.url(reverse("chat:conversation", args=[conversation.pk])),
    }


# Every MCP tool's implementation, by tool name (mcpserver.server registers one MCP tool for
# each; tests/test_isolation.py enumerates them).
TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "document_search": document_search,
    "note_search": note_search,
    "note_read": note_read,
    "list_notebooks": list_notebooks,
    "ask": ask,
}
