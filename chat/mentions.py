"""Suggestions for the composer's `@` and `@@` mentions.

`@term` offers the current notebook's notes (its Markdown sources); `@@term` offers everything
the user can reach: notes, ready PDFs, and notebooks as folders with how many sources they hold
(a folder with none is not offered). Candidates are read through the selectors that take `user`
(nothing of anyone else's can be a candidate) and ranked by `rank`, a pure function of the
candidates and the term, so the ordering is testable without a database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict

from django.db.models import Count, Q
from django.urls import reverse
from django.utils.translation import gettext as _

from attachments.selectors import searchable_attachments
from chat.selection import FOLDER_MAX, FOLDER_WARN
from notes.selectors import note_list, notebook_list, visible_notes

if TYPE_CHECKING:
    from core.types import User
    from notes.models import Notebook

# A folder with more than FOLDER_WARN sources is allowed with a warning; more than FOLDER_MAX
# is refused. chat.selection enforces them when the question is asked; here they are shown.
SEPARATOR = " / "
# Candidates read per kind for one keystroke: a bound on the work, far above what one person
# types a mention for (the SQL prefilter already keeps only names or paths containing the term).
CANDIDATES_PER_KIND = 1000

Kind = Literal["note", "file", "folder"]
KIND_ORDER: dict[str, int] = {"note": 0, "file": 1, "folder": 2}

# Lexical levels: where the term matches decides the score; the name beats the path.
EXACT, STARTS, WORD_START, CONTAINS = 100, 80, 60, 40
PATH_PENALTY = 50  # a match only in the path scores this much less than the same in the name
CURRENT_BOOST = 5  # the notebook being worked in wins ties with others


@dataclass(frozen=True)
class Candidate:
    kind: Kind
    ref: str  # "note:12", "attachment:5", "notebook:3"
    name: str
    path: str  # "Notebook / Note / file.pdf"
    notebook_id: int
    count: int = 1
    url: str = ""


class Suggestion(TypedDict, total=False):
    kind: Kind
    ref: str
    name: str
    path: str
    count: int
    url: str
    warning: str
    refused: bool


def _level(term: str, text: str) -> int:
    """How well `term` (lower case) matches `text`: exact > starts with > starts a word >
    contains anywhere; 0 for no match."""
    text = text.lower()
    if text == term:
        return EXACT
    if text.startswith(term):
        return STARTS
    if re.search(r"(?:^|[\s/_\-.()\[\]])" + re.escape(term), text):
        return WORD_START
    if term in text:
        return CONTAINS
    return 0


def score(term: str, candidate: Candidate, *, current_notebook_id: int | None = None) -> int:
    """The lexical score of one candidate for `term` (0: not a match). An empty term matches
    everything equally, so only the boosts order the list."""
    term = term.strip().lower()
    if term:
        in_path = _level(term, candidate.path)
        # A match only in the path (the notebook's or the note's title) still counts, below
        # the same match in the name.
        best = max(_level(term, candidate.name), max(in_path - PATH_PENALTY, 1) if in_path else 0)
        if best == 0:
            return 0
    else:
        best = 1
    if current_notebook_id is not None and candidate.notebook_id == current_notebook_id:
        best += CURRENT_BOOST
    return best


def rank(
    candidates: list[Candidate],
    term: str,
    *,
    current_notebook_id: int | None = None,
    limit: int = 20,
) -> list[Candidate]:
    """The matching candidates, best first; ties broken by kind (note, file, folder), then
    path and ref (case-insensitive), so the order is the same on every call."""
    scored = [(score(term, c, current_notebook_id=current_notebook_id), c) for c in candidates]
    matching = [(s, c) for s, c in scored if s > 0]
    matching.sort(key=lambda sc: (-sc[0], KIND_ORDER[sc[1].kind], sc[1].path.lower(), sc[1].ref))
    return [c for _, c in matching[:limit]]


def _join(*parts: str) -> str:
    return SEPARATOR.join(parts)


def _note_candidates(*, user: User, notebook: Notebook | None, term: str) -> list[Candidate]:
    if notebook is not None:
        notes = note_list(user=user, notebook_id=notebook.pk)
    else:
        notes = visible_notes(user=user).filter(trashed_at__isnull=True).select_related("notebook")
    if term:
        notes = notes.filter(Q(title__icontains=term) | Q(notebook__title__icontains=term))
    return [
        Candidate(
            kind="note",
            ref=f"note:{n.pk}",
            name=n.title,
            path=_join(n.notebook.title, n.title),
            notebook_id=n.notebook_id,
            url=reverse("attachments:note_detail", args=[n.pk]),
        )
        for n in notes.order_by("pk")[:CANDIDATES_PER_KIND]
    ]


def _file_candidates(*, user: User, term: str) -> list[Candidate]:
    files = searchable_attachments(user=user).select_related("note__notebook")
    if term:
        files = files.filter(
            Q(original_name__icontains=term)
            | Q(note__title__icontains=term)
            | Q(note__notebook__title__icontains=term)
        )
    return [
        Candidate(
            kind="file",
            ref=f"attachment:{a.pk}",
            name=a.original_name,
            path=_join(a.note.notebook.title, a.note.title, a.original_name),
            notebook_id=a.note.notebook_id,
            url=reverse("attachments:download", args=[a.pk]),
        )
        for a in files.order_by("pk")[:CANDIDATES_PER_KIND]
    ]


def folder_counts(*, user: User) -> dict[int, int]:
    """Sources per visible notebook: its live notes plus the ready PDFs of those notes."""
    counts = {nb.pk: nb.note_count for nb in notebook_list(user=user)}
    pdfs = (
        searchable_attachments(user=user)
        .order_by()
        .values("note__notebook_id")
        .annotate(n=Count("pk"))
    )
    for row in pdfs:
        counts[row["note__notebook_id"]] = counts.get(row["note__notebook_id"], 0) + row["n"]
    return counts


def _folder_candidates(*, user: User, term: str) -> list[Candidate]:
    counts = folder_counts(user=user)
    notebooks = notebook_list(user=user)
    if term:
        notebooks = notebooks.filter(title__icontains=term)
    return [
        Candidate(
            kind="folder",
            ref=f"notebook:{nb.pk}",
            name=nb.title,
            path=nb.title,
            notebook_id=nb.pk,
            count=counts.get(nb.pk, 0),
            url=reverse("workspace:page", args=[nb.pk]),
        )
        for nb in notebooks.order_by("pk")[:CANDIDATES_PER_KIND]
        if counts.get(nb.pk, 0) > 0
    ]


def folder_notice(count: int) -> tuple[str, bool]:
    """What choosing a folder of `count` sources says, and whether it is refused."""
    if count > FOLDER_MAX:
        return (
            _(
                "This folder holds %(count)d sources, more than %(max)d: choose a smaller "
                "folder or single files."
            )
            % {"count": count, "max": FOLDER_MAX},
            True,
        )
    if count > FOLDER_WARN:
        return (
            _(
                "This folder holds %(count)d sources: answers may take longer and cite fewer "
                "of them."
            )
            % {"count": count},
            False,
        )
    return "", False


def suggest(
    *, user: User, notebook: Notebook, term: str, everything: bool, limit: int = 20
) -> list[Suggestion]:
    """Ranked mention suggestions for `term`: the notebook's live notes (`@`), or every note,
    ready PDF and non-empty notebook the user can see (`@@`). Never another user's objects:
    every candidate comes from a selector given `user`."""
    term = term.strip()
    if everything:
        candidates = (
            _note_candidates(user=user, notebook=None, term=term)
            + _file_candidates(user=user, term=term)
            + _folder_candidates(user=user, term=term)
        )
    else:
        candidates = _note_candidates(user=user, notebook=notebook, term=term)
    results: list[Suggestion] = []
    for c in rank(candidates, term, current_notebook_id=notebook.pk, limit=limit):
        item: Suggestion = {
            "kind": c.kind,
            "ref": c.ref,
            "name": c.name,
            "path": c.path,
            "count": c.count,
            "url": c.url,
        }
        if c.kind == "folder":
            warning, refused = folder_notice(c.count)
            if warning:
                item["warning"] = warning
            if refused:
                item["refused"] = True
        results.append(item)
    return results
