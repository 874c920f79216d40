"""Sources the user chooses for a question: `@` / `@@` chips and the workspace's checkboxes.

A question may carry explicit selections (chips) and exclusions (sources the user unticked or
whose chip they removed). The client sends both with every question (they are its state; the
server keeps no selection between questions) and the question stores them, resolved here
against the user: a chip names a note, a PDF or a notebook (a folder) by `ref`; it is
flattened to source ids ("note:3", "attachment:5"), never trusting the names, counts or ids
the client sent beyond what the user may see.

Merging (per question, once the question has been reformulated):
- no chips and no exclusions: the conversation's own scope, as before (`None`);
- chips: the union of their sources, plus the sources cited by the conversation's earlier
  answers when the question follows up (carry-over), deduplicated;
- no chips but exclusions: the conversation's scope, listed;
- in every case minus the excluded sources.
Retrieval then runs inside that set; when it finds nothing there but chips exist, the
chosen sources' opening passages stand in (chat.tools.builtin).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from django.core.exceptions import ValidationError
from django.http import Http404
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from pydantic import BaseModel, Field
from pydantic import ValidationError as PydanticError

from attachments.models import NoteAttachment
from attachments.selectors import attachment_get
from chat.models import Message
from notes.models import Note
from notes.selectors import note_get, notebook_get

if TYPE_CHECKING:
    from chat.models import Conversation
    from core.types import User

FOLDER_WARN = 15  # a folder with more sources is allowed, with a warning
FOLDER_MAX = 200  # a folder with more sources is refused
MAX_CHIPS = 50
MAX_EXCLUDED = 2000
REF = r"^(note|attachment|notebook):[1-9][0-9]{0,17}$"


class Chip(BaseModel):
    """One chip as the client sends it: only `kind`, `mode` and `ref` are believed."""

    kind: Literal["file", "path"]
    mode: Literal["markdown", "all"] = "all"
    ref: str = Field(pattern=REF)
    name: str = Field(default="", max_length=500)
    path: str = Field(default="", max_length=2000)
    count: int = 0


class Chips(BaseModel):
    chips: list[Chip] = Field(default_factory=list, max_length=MAX_CHIPS)
    excluded: list[str] = Field(default_factory=list, max_length=MAX_EXCLUDED)


class _Excluded(BaseModel):
    ref: str = Field(pattern=REF)  # a source, or a folder whose chip was removed


class SourceUnavailable(ValidationError):
    """A chip names a source the user cannot use: deleted, trashed or someone else's (the
    same message for all, so nothing tells them apart). The API answers it 404."""


def _unreadable() -> ValidationError:
    return ValidationError(
        _("The chosen sources could not be read. Remove the chips and choose them again."),
        code="selection",
    )


def parse(selections: object, excluded: object) -> Chips:
    """The chips and exclusions a question was sent with: JSON text (a form field) or already
    a list (the API). Empty or missing means none; anything else malformed is refused."""

    def load(value: object) -> list[Any]:
        if value in (None, ""):
            return []
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise _unreadable() from exc
        if not isinstance(value, list):
            raise _unreadable()
        return value

    try:
        chips = Chips(chips=load(selections), excluded=load(excluded))
        for ref in chips.excluded:
            _Excluded(ref=ref)
    except PydanticError as exc:
        raise _unreadable() from exc
    chips.excluded = list(dict.fromkeys(chips.excluded))
    return chips


@dataclass
class Resolved:
    """A chip as stored on the question, with the server's own name, path and sources."""

    kind: str
    mode: str
    ref: str
    name: str
    path: str
    source_ids: list[str]
    url: str = ""
    warning: str = ""

    @property
    def subfile_count(self) -> int:
        return len(self.source_ids)

    def stored(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "mode": self.mode,
            "ref": self.ref,
            "name": self.name,
            "path": self.path,
            "source_ids": self.source_ids,
            "subfile_count": self.subfile_count,
            **({"url": self.url} if self.url else {}),
            **({"warning": self.warning} if self.warning else {}),
        }


def _ready(attachments: Any) -> Any:
    return attachments.filter(status=NoteAttachment.Status.READY, note__trashed_at__isnull=True)


def folder_sources(notebook_id: int, mode: str) -> list[str]:
    """A notebook's sources as a folder: its live notes, and (mode all) their ready PDFs.
    The caller has checked that the user may see the notebook."""
    notes = Note.objects.filter(notebook_id=notebook_id, trashed_at__isnull=True)
    ids = [f"note:{pk}" for pk in notes.order_by("pk").values_list("pk", flat=True)]
    if mode == "all":
        files = _ready(NoteAttachment.objects.filter(note__notebook_id=notebook_id))
        ids += [f"attachment:{pk}" for pk in files.order_by("pk").values_list("pk", flat=True)]
    return ids


def resolve(*, user: User, chip: Chip) -> Resolved:
    """A chip checked against the user: ValidationError (naming it) when its source is gone,
    not theirs, not ready, or a folder too large to use."""

    kind, _sep, number = chip.ref.partition(":")
    pk = int(number)
    label = chip.name or chip.path or chip.ref
    try:
        if kind == "note":
            note = note_get(user=user, note_id=pk, include_trashed=False)
            path = f"{note.notebook.title} / {note.title}"
            return Resolved("file", chip.mode, chip.ref, note.title, path, [chip.ref])
        if kind == "attachment":
            attachment = attachment_get(user=user, attachment_id=pk)
            if attachment.status != NoteAttachment.Status.READY or attachment.note.trashed_at:
                message = _("“%(name)s” is not ready to be searched yet.") % {"name": label}
                raise ValidationError(message, code="selection")
            note = attachment.note
            path = f"{note.notebook.title} / {note.title} / {attachment.original_name}"
            name = attachment.original_name
            return Resolved("file", chip.mode, chip.ref, name, path, [chip.ref])
        notebook = notebook_get(user=user, notebook_id=pk)
    except Http404 as exc:
        message = _("“%(name)s” is no longer available: remove its chip.") % {"name": label}
        raise SourceUnavailable(message, code="selection") from exc
    sources = folder_sources(notebook.pk, chip.mode)
    if len(sources) > FOLDER_MAX:
        message = _(
            "“%(name)s” holds %(count)s sources, more than the %(limit)s one question can use. "
            "Choose a smaller folder or single files."
        ) % {"name": notebook.title, "count": len(sources), "limit": FOLDER_MAX}
        raise ValidationError(message, code="selection")
    warning = ""
    if len(sources) > FOLDER_WARN:
        warning = ngettext(
            "“%(name)s” holds %(count)s source: answers may miss some of them.",
            "“%(name)s” holds %(count)s sources: answers may miss some of them.",
            len(sources),
        ) % {"name": notebook.title, "count": len(sources)}
    url = reverse("workspace:page", args=[notebook.pk])
    return Resolved("path", chip.mode, chip.ref, notebook.title, notebook.title, sources, url,
                    warning)  # fmt: skip


def resolve_all(*, user: User, chips: Chips) -> list[Resolved]:
    """Every chip resolved (deduplicated by ref), in the order chosen."""
    seen: set[str] = set()
    out = []
    for chip in chips.chips:
        if chip.ref in seen:
            continue
        seen.add(chip.ref)
        out.append(resolve(user=user, chip=chip))
    return out


# --- reading what a question stored (older questions have nothing, or partial items) --------


def stored_selections(message: Message) -> list[dict[str, Any]]:
    """The chips a question stored, each with at least kind, mode, ref, name, path, source_ids
    and subfile_count; malformed items (older or hand-edited rows) are skipped."""
    out = []
    for item in message.explicit_selections or []:
        if not isinstance(item, dict) or not isinstance(item.get("ref"), str):
            continue
        sources = [s for s in item.get("source_ids") or [] if isinstance(s, str)]
        out.append({
            "kind": item.get("kind") if item.get("kind") in ("file", "path") else "file",
            "mode": item.get("mode") if item.get("mode") in ("markdown", "all") else "all",
            "ref": item["ref"],
            "name": str(item.get("name") or item["ref"]),
            "path": str(item.get("path") or ""),
            "source_ids": sources,
            "subfile_count": len(sources),
            **({"url": str(item["url"])} if item.get("url") else {}),
            **({"warning": str(item["warning"])} if item.get("warning") else {}),
        })  # fmt: skip
    return out


def stored_excluded(message: Message) -> list[str]:
    return [s for s in message.excluded_sources or [] if isinstance(s, str)]


def state(conversation: Conversation | None) -> dict[str, Any]:
    """What the composer starts from: the chips and exclusions of the conversation's latest
    question (they persist after sending), for `json_script`."""

    if conversation is None:
        return {"selections": [], "excluded": [], "warning": ""}
    last = (
        Message.objects.filter(conversation=conversation, role=Message.Role.USER)
        .order_by("-created_at", "-pk")
        .first()
    )
    if last is None:
        return {"selections": [], "excluded": [], "warning": ""}
    keys = ("kind", "mode", "ref", "name", "path", "url")
    chips = [
        {**{key: c[key] for key in keys if key in c}, "count": c["subfile_count"]}
        for c in stored_selections(last)
    ]
    return {"selections": chips, "excluded": stored_excluded(last), "warning": ""}


# --- merging (the design's §7) ---------------------------------------------------------------


@dataclass
class SourceSet:
    """The sources a question may use: ids of PDFs and of notes (searched as passages), and
    how they came about, for the answer's source summary."""

    attachments: set[int] = field(default_factory=set)
    notes: set[int] = field(default_factory=set)
    explicit: set[str] = field(default_factory=set)  # refs the chips flattened to
    carried: set[str] = field(default_factory=set)  # refs carried over from earlier answers
    excluded: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, refs: set[str], **kwargs: Any) -> SourceSet:
        found = cls(**kwargs)
        for ref in refs:
            kind, _sep, number = ref.partition(":")
            if kind == "attachment":
                found.attachments.add(int(number))
            elif kind == "note":
                found.notes.add(int(number))
        return found

    def summary(self) -> dict[str, int]:
        return {
            "explicit_selected_count": len(self.explicit),
            "carried_over_count": len(self.carried),
            "excluded_count": len(self.excluded),
            "source_count": len(self.attachments) + len(self.notes),
        }


def cited_sources(conversation: Conversation, before: Message) -> set[str]:
    """Refs of the sources cited by the conversation's answers before `before` (carry-over)."""

    answers = (
        Message.objects.filter(
            conversation=conversation, role=Message.Role.ASSISTANT, status=Message.Status.COMPLETE
        )
        .filter(created_at__lte=before.created_at)
        .exclude(pk=before.pk)
    )
    refs: set[str] = set()
    for citations in answers.values_list("citations", flat=True):
        for citation in citations or []:
            if not isinstance(citation, dict):
                continue
            if citation.get("kind") == "note" and isinstance(citation.get("note_id"), int):
                refs.add(f"note:{citation['note_id']}")
            elif isinstance(citation.get("attachment_id"), int):
                refs.add(f"attachment:{citation['attachment_id']}")
    return refs


def conversation_sources(conversation: Conversation) -> set[str]:
    """The refs of every source in the conversation's own scope (its notebook, its note, or
    its one PDF): what exclusions are taken from when there are no chips."""
    if conversation.attachment_id is not None:
        return {f"attachment:{conversation.attachment_id}"}
    files = _ready(NoteAttachment.objects.filter(note__notebook_id=conversation.notebook_id))
    refs: set[str] = set()
    if conversation.note_id is not None:
        files = files.filter(note_id=conversation.note_id)
    else:
        notes = Note.objects.filter(notebook_id=conversation.notebook_id, trashed_at__isnull=True)
        refs |= {f"note:{pk}" for pk in notes.values_list("pk", flat=True)}
    return refs | {f"attachment:{pk}" for pk in files.values_list("pk", flat=True)}


def merge(
    *, explicit: set[str], excluded: set[str], carried: set[str], default: set[str] | None
) -> SourceSet | None:
    """The prepared set (pure, see the module's docstring): None when the conversation's own
    scope applies unchanged."""
    if not explicit and not excluded:
        return None
    if explicit:
        carried = carried - explicit - excluded
        chosen = explicit | carried
    else:
        carried = set()
        chosen = set(default or ())
    return SourceSet.of(chosen - excluded, explicit=explicit - excluded, carried=carried,
                        excluded=excluded)  # fmt: skip


def excluded_sources(*, user: User, refs: list[str], chosen: set[str]) -> set[str]:
    """Exclusions as source refs: a folder (a removed folder chip) stands for its sources
    (of a notebook the user may see), but for those chosen again by a chip of their own."""
    out: set[str] = set()
    for ref in refs:
        kind, _sep, number = ref.partition(":")
        if kind != "notebook":
            out.add(ref)
            continue
        try:
            notebook = notebook_get(user=user, notebook_id=int(number))
        except (Http404, ValueError):
            continue
        out |= set(folder_sources(notebook.pk, "all")) - chosen
    return out


def prepare(*, conversation: Conversation, asked: Message, follow_up: bool) -> SourceSet | None:
    """The sources the question `asked` may use (see merge); carry-over only for a follow-up."""
    chips = stored_selections(asked)
    explicit = {ref for chip in chips for ref in chip["source_ids"]}
    singles = {chip["ref"] for chip in chips if chip["kind"] == "file"}
    excluded = excluded_sources(user=conversation.owner, refs=stored_excluded(asked),
                                chosen=singles)  # fmt: skip
    if not explicit and not excluded:
        return None
    carried = cited_sources(conversation, asked) if follow_up and explicit else set()
    default = conversation_sources(conversation) if not explicit else None
    return merge(explicit=explicit, excluded=excluded, carried=carried, default=default)


def form_state(
    conversation: Conversation | None, selections: object = None, excluded: object = None
) -> dict[str, Any]:
    """What the composer shows: the chips and exclusions just sent (a refused question keeps
    them, like its text), else those of the conversation's latest question."""
    if selections in (None, "") and excluded in (None, ""):
        return state(conversation)
    try:
        chips = parse(selections, excluded)
    except ValidationError:
        return state(conversation)
    keys = ("kind", "mode", "ref", "name", "path", "count")
    shown = [{key: getattr(chip, key) for key in keys} for chip in chips.chips]
    return {"selections": shown, "excluded": chips.excluded, "warning": ""}
