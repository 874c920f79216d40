"""What goes into an export, read only through the selectors with the requesting `user`:
a notebook's notes, sources and guides are those the user may see, and its conversations and
memories only the user's own (chat.selectors filters them by owner), so a member of a shared
notebook exports the notebook with their own chats and nobody else's.

Planning reads titles and ids; each file's content is read when the ZIP is written
(exports.archive), through the same selectors again."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.selectors import api_token_list
from attachments.naming import display_name
from attachments.selectors import notebook_sources
from chat import selectors as chat_selectors
from exports.archive import Archive, Entry
from exports.markdown import (
    conversation_markdown,
    guide_markdown,
    memories_markdown,
    note_markdown,
    studio_csv_rows,
    studio_markdown,
)
from exports.naming import Folder, safe_name, source_file_name
from guides.models import Guide
from guides.selectors import notebook_guide_get, source_guide_get
from notes.models import Notebook
from notes.selectors import note_get, note_list, notebook_get, notebook_list
from studio import selectors as studio_selectors
from studio.models import StudioOutput

if TYPE_CHECKING:
    from core.types import User

KINDS = {
    "note": "Notes",
    "trash": "Notes in the trash",
    "conversation": "Conversations",
    "guide": "Guides",
    "source": "Original files",
    "memories": "Memories",
    "studio": "Studio",
    "account": "Account",
}


@dataclass(frozen=True)
class Bundle:
    archive: Archive
    filename: str  # of the ZIP, for Content-Disposition


def _note_text(user: User, note_id: int) -> Callable[[], str]:
    return lambda: note_markdown(note_get(user=user, note_id=note_id))


def _conversation_text(user: User, conversation_id: int) -> Callable[[], str]:
    def text() -> str:
        conversation = chat_selectors.conversation_get(user=user, conversation_id=conversation_id)
        messages = chat_selectors.message_list(user=user, conversation_id=conversation_id)
        return conversation_markdown(conversation, messages.iterator())

    return text


def _add_notes(
    archive: Archive, *, user: User, notebook: Notebook, prefix: str, author_only: bool
) -> None:
    for trashed, folder in ((False, "notes"), (True, "trash")):
        names = Folder(prefix + folder)
        notes = note_list(user=user, notebook_id=notebook.pk, trashed=trashed)
        if author_only:
            notes = notes.filter(author=user)
        for note_id, title, updated in notes.values_list("pk", "title", "updated_at"):
            archive.add_text(
                names.name(title, suffix=".md"),
                _note_text(user, note_id),
                modified=updated,
                kind="trash" if trashed else "note",
            )


def _add_conversations(archive: Archive, *, user: User, notebook: Notebook, prefix: str) -> None:
    names = Folder(prefix + "conversations")
    conversations = chat_selectors.conversation_list(user=user, notebook_id=notebook.pk)
    for conversation_id, title, updated in conversations.values_list("pk", "title", "updated_at"):
        archive.add_text(
            names.name(title, suffix=".md"),
            _conversation_text(user, conversation_id),
            modified=updated,
            kind="conversation",
        )


def _add_memories(archive: Archive, *, user: User, notebook: Notebook, prefix: str) -> None:
    memories = chat_selectors.memory_list(user=user, notebook_id=notebook.pk)
    latest = memories.order_by("-updated_at").values_list("updated_at", flat=True).first()
    if latest is None:
        return
    archive.add_text(
        prefix + "memories.md",
        lambda: memories_markdown(notebook.title, memories.all()),
        modified=latest,
        kind="memories",
    )


def _add_guides_and_sources(
    archive: Archive, *, user: User, notebook: Notebook, prefix: str, originals: bool
) -> None:
    guides = Folder(prefix + "guides")
    notebook_guide = notebook_guide_get(user=user, notebook_id=notebook.pk).guide
    if notebook_guide is not None and notebook_guide.has_content:
        archive.add_text(
            guides.name(_("Notebook guide"), suffix=".md"),
            _notebook_guide_text(user, notebook.pk),
            modified=notebook_guide.updated_at,
            kind="guide",
        )
    files = Folder(prefix + "sources")
    for attachment in notebook_sources(user=user, notebook_id=notebook.pk):
        name = display_name(attachment)
        guide = source_guide_get(user=user, attachment_id=attachment.pk).guide
        if guide is not None and guide.has_content:
            archive.add_text(
                guides.name(name, suffix=".md"),
                _source_guide_text(user, attachment.pk, name),
                modified=guide.updated_at,
                kind="guide",
            )
        if originals:
            stem, suffix = source_file_name(attachment.original_name, attachment.extension)
            archive.add_file(
                files.name(stem, suffix=suffix),
                Path(attachment.file.path),
                modified=attachment.created_at,
                kind="source",
            )


def _notebook_guide_text(user: User, notebook_id: int) -> Callable[[], str]:
    return lambda: _guide_text(
        notebook_guide_get(user=user, notebook_id=notebook_id).guide, _("Notebook guide")
    )


def _guide_text(guide: Guide | None, heading: str) -> str:
    return guide_markdown(guide, heading=heading) if guide is not None else ""


def _source_guide_text(user: User, attachment_id: int, heading: str) -> Callable[[], str]:
    return lambda: _guide_text(
        source_guide_get(user=user, attachment_id=attachment_id).guide, heading
    )


def _add_notebook(
    archive: Archive,
    *,
    user: User,
    notebook: Notebook,
    prefix: str,
    originals: bool,
    memories: bool,
) -> None:
    _add_notes(archive, user=user, notebook=notebook, prefix=prefix, author_only=False)
    _add_conversations(archive, user=user, notebook=notebook, prefix=prefix)
    _add_guides_and_sources(
        archive, user=user, notebook=notebook, prefix=prefix, originals=originals
    )
    _add_studio(archive, user=user, notebook=notebook, prefix=prefix)
    if memories:
        _add_memories(archive, user=user, notebook=notebook, prefix=prefix)


def _studio_text(user: User, output_id: int) -> Callable[[], str]:
    return lambda: studio_markdown(studio_selectors.output_get(user=user, output_id=output_id))


def _add_studio(archive: Archive, *, user: User, notebook: Notebook, prefix: str) -> None:
    """The notebook's ready Studio outputs (everyone's: they belong to the notebook)."""
    folder = Folder(f"{prefix}studio/")
    ready = studio_selectors.output_list(user=user, notebook_id=notebook.pk).filter(
        status=StudioOutput.Status.READY
    )
    for output in ready.order_by("created_at", "pk"):
        archive.add_text(
            folder.name(output.title, suffix=".md", fallback="output"),
            _studio_text(user, output.pk),
            modified=output.ready_at or output.updated_at,
            kind="studio",
        )


def _listing(entries: list[Entry], *, strip: str = "") -> list[str]:
    lines: list[str] = []
    for kind, label in KINDS.items():
        paths = [e.path for e in entries if e.kind == kind]
        if paths:
            lines.append(f"\n## {_(label)} ({len(paths)})\n")
            lines += [f"- `{path}`" for path in paths]
    return lines


def _readme(title: str, intro: str) -> Callable[[list[Entry], list[Entry]], str]:
    def readme(written: list[Entry], missing: list[Entry]) -> str:
        date = timezone.localtime().isoformat(timespec="seconds")
        lines = [f"# {title}", "", intro, "", _("Exported on %(date)s.") % {"date": date}]
        if not written:
            lines += ["", _("There was nothing to export.")]
        lines += _listing(written)
        if missing:
            gone = _("These files were deleted while the export was being written:")
            lines += ["", f"## {_('Left out')}", "", gone, ""]
            lines += [f"- `{e.path}`" for e in missing]
        return "\n".join(lines) + "\n"

    return readme


def notebook_bundle(*, user: User, notebook_id: int, originals: bool) -> Bundle:
    """One notebook the user may see (Http404 otherwise): its notes (and trash), the user's own
    conversations in it, its guides and, with `originals`, its sources' original files."""
    notebook = notebook_get(user=user, notebook_id=notebook_id)
    archive = Archive()
    _add_notebook(
        archive, user=user, notebook=notebook, prefix="", originals=originals, memories=False
    )
    intro = _(
        "The notebook “%(title)s” as Markdown: notes/ (each with its title, dates and author "
        "in front matter), conversations/ (your own: each question and answer, citations as "
        "footnotes), guides/ and, when asked for, sources/ (the original files)."
    ) % {"title": " ".join(notebook.title.split())}
    if notebook.description:
        intro += "\n\n> " + " ".join(notebook.description.split())
    archive.readme = _readme(" ".join(notebook.title.split()), intro)
    return Bundle(archive, safe_name(notebook.title, suffix=".zip", fallback="notebook"))


def conversation_export(*, user: User, conversation_id: int) -> tuple[str, str]:
    """(file name, Markdown) of one of the user's conversations; Http404 for anyone else's."""
    conversation = chat_selectors.conversation_get(user=user, conversation_id=conversation_id)
    messages = chat_selectors.message_list(user=user, conversation_id=conversation_id)
    text = conversation_markdown(conversation, messages.iterator())
    return safe_name(conversation.title, suffix=".md", fallback="conversation"), text


def studio_export(*, user: User, output_id: int) -> tuple[str, str] | None:
    """(file name, Markdown) of a Studio output of a notebook the user may see; None while it
    is not ready; Http404 for anyone else's."""
    output = studio_selectors.output_get(user=user, output_id=output_id)
    if output.status != StudioOutput.Status.READY:
        return None
    return safe_name(output.title, suffix=".md", fallback="studio"), studio_markdown(output)


def studio_pdf_export(*, user: User, output_id: int) -> tuple[str, bytes] | None:
    """(file name, PDF) of a Studio output of a notebook the user may see (exports.pdf); None
    while it is not ready; Http404 for anyone else's."""
    # fpdf2 and fontTools load (a third of a second) only when a PDF is asked for.
    from exports.pdf import studio_pdf

    output = studio_selectors.output_get(user=user, output_id=output_id)
    if output.status != StudioOutput.Status.READY:
        return None
    return safe_name(output.title, suffix=".pdf", fallback="studio"), studio_pdf(output)


def studio_cards(*, user: User, output_id: int) -> tuple[str, list[list[str]]] | None:
    """(file name, CSV rows) of flashcards or a quiz; None while not ready or of another kind."""
    output = studio_selectors.output_get(user=user, output_id=output_id)
    cards = (StudioOutput.Kind.FLASHCARDS, StudioOutput.Kind.QUIZ)
    if output.status != StudioOutput.Status.READY or output.kind not in cards:
        return None
    return safe_name(output.title, suffix=".csv", fallback="cards"), studio_csv_rows(output)


def _account(user: User) -> dict[str, Any]:
    """The account without its secrets: no password hash, no token hashes."""

    def stamp(value: Any) -> str | None:
        return value.isoformat(timespec="seconds") if value else None

    return {
        "username": user.get_username(),
        "email": user.email,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "date_joined": stamp(user.date_joined),
        "last_login": stamp(user.last_login),
        "is_staff": user.is_staff,
        "has_password": user.has_usable_password(),
        "api_tokens": [
            {
                "name": token.name,
                "prefix": token.prefix,
                "created": stamp(token.created_at),
                "last_used": stamp(token.last_used_at),
                "revoked": stamp(token.revoked_at),
            }
            for token in api_token_list(user=user)
        ],
    }


def user_bundle(*, user: User, originals: bool = True) -> Bundle:
    """Everything the user owns and wrote: account.json, each notebook they own (as
    notebook_bundle, plus their memories) under notebooks/, and under shared/ the notebooks
    others shared with them: their own conversations, memories and the notes they wrote."""
    archive = Archive()
    archive.add_text(
        "account.json",
        lambda: json.dumps(_account(user), ensure_ascii=False, indent=2) + "\n",
        modified=timezone.now(),
        kind="account",
    )
    owned, shared = Folder("notebooks"), Folder("shared")
    for notebook in notebook_list(user=user).order_by("title", "pk"):
        if notebook.owner_id == user.pk:
            prefix = owned.name(notebook.title, fallback="notebook") + "/"
            _add_notebook(
                archive,
                user=user,
                notebook=notebook,
                prefix=prefix,
                originals=originals,
                memories=True,
            )
            continue
        prefix = shared.name(notebook.title, fallback="notebook") + "/"
        _add_notes(archive, user=user, notebook=notebook, prefix=prefix, author_only=True)
        _add_conversations(archive, user=user, notebook=notebook, prefix=prefix)
        _add_memories(archive, user=user, notebook=notebook, prefix=prefix)
    username = user.get_username()
    intro = _(
        "Everything %(username)s keeps in Notebook: account.json (the account, without "
        "passwords or token secrets), notebooks/ (each notebook you own: notes, your "
        "conversations, guides, memories and original files) and shared/ (in notebooks "
        "shared with you: your conversations, your memories and the notes you wrote)."
    ) % {"username": username}
    archive.readme = _readme(_("Notebook export of %(username)s") % {"username": username}, intro)
    stamp = timezone.localdate().isoformat()
    return Bundle(archive, safe_name(f"notebook-{username}-{stamp}", suffix=".zip"))
