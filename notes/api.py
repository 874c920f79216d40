"""REST endpoints for notebooks and notes; every read goes through a selector with request.user."""

from __future__ import annotations

from django.db.models import QuerySet
from ninja import Router, Status
from ninja.pagination import paginate

from core.params import Id, Pagination, path_id
from core.ratelimit import rate_limit, user_key
from core.types import AuthenticatedHttpRequest
from notes import selectors, services
from notes.models import Note, Notebook
from notes.schemas import NotebookIn, NotebookOut, NotebookPatch, NoteIn, NoteOut, NotePatch

router = Router(tags=["notebooks"])


@router.get("/notebooks", response=list[NotebookOut])
@paginate(Pagination)
def list_notebooks(request: AuthenticatedHttpRequest) -> QuerySet[Notebook]:
    return selectors.notebook_list(user=request.user)


@router.post("/notebooks", response={201: NotebookOut})
def create_notebook(request: AuthenticatedHttpRequest, payload: NotebookIn) -> Status[Notebook]:
    notebook = services.notebook_create(
        owner=request.user, title=payload.title, description=payload.description
    )
    return Status(201, selectors.notebook_get(user=request.user, notebook_id=notebook.pk))


@router.get("/notebooks/{notebook_id}", response=NotebookOut)
def retrieve_notebook(request: AuthenticatedHttpRequest, notebook_id: Id) -> Notebook:
    return selectors.notebook_get(user=request.user, notebook_id=notebook_id)


@router.patch("/notebooks/{notebook_id}", response=NotebookOut)
def update_notebook(
    request: AuthenticatedHttpRequest, notebook_id: Id, payload: NotebookPatch
) -> Notebook:
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id)
    services.notebook_update(
        notebook=notebook, title=payload.title, description=payload.description
    )
    return selectors.notebook_get(user=request.user, notebook_id=notebook_id)


@router.delete("/notebooks/{notebook_id}", response={204: None})
def delete_notebook(request: AuthenticatedHttpRequest, notebook_id: Id) -> Status[None]:
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id)
    services.notebook_delete(notebook=notebook)
    return Status(204, None)


@router.get("/notebooks/{notebook_id}/notes", response=list[NoteOut], tags=["notes"])
@paginate(Pagination)
def list_notes(
    request: AuthenticatedHttpRequest, notebook_id: int = path_id(), trashed: bool = False
) -> QuerySet[Note]:
    """Live notes of a notebook, or with `trashed=true` the notebook's trash."""
    return selectors.note_list(user=request.user, notebook_id=notebook_id, trashed=trashed)


@router.post("/notebooks/{notebook_id}/notes", response={201: NoteOut}, tags=["notes"])
def create_note(
    request: AuthenticatedHttpRequest, notebook_id: Id, payload: NoteIn
) -> Status[Note]:
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id)
    rate_limit(scope="note", key=user_key(request.user))  # 429 beyond it (notebook.api)
    note = services.note_create(
        notebook=notebook, author=request.user, title=payload.title, body=payload.body
    )
    return Status(201, note)


@router.get("/notes/{note_id}", response=NoteOut, tags=["notes"])
def retrieve_note(request: AuthenticatedHttpRequest, note_id: Id) -> Note:
    return selectors.note_get(user=request.user, note_id=note_id)


@router.patch("/notes/{note_id}", response=NoteOut, tags=["notes"])
def update_note(request: AuthenticatedHttpRequest, note_id: Id, payload: NotePatch) -> Note:
    note = selectors.note_get(user=request.user, note_id=note_id)
    if payload.title is not None or payload.body is not None:  # the text changes: reindexed
        rate_limit(scope="note", key=user_key(request.user))
    return services.note_update(note=note, title=payload.title, body=payload.body)


@router.post("/notes/{note_id}/trash", response=NoteOut, tags=["notes"])
def trash_note(request: AuthenticatedHttpRequest, note_id: Id) -> Note:
    return services.note_trash(note=selectors.note_get(user=request.user, note_id=note_id))


@router.post("/notes/{note_id}/restore", response=NoteOut, tags=["notes"])
def restore_note(request: AuthenticatedHttpRequest, note_id: Id) -> Note:
    return services.note_restore(note=selectors.note_get(user=request.user, note_id=note_id))


@router.delete("/notes/{note_id}", response={204: None}, tags=["notes"])
def delete_note(request: AuthenticatedHttpRequest, note_id: Id) -> Status[None]:
    """Delete a note forever. Only trashed notes can be deleted (409 otherwise)."""
    services.note_delete(note=selectors.note_get(user=request.user, note_id=note_id))
    return Status(204, None)
