"""REST endpoints for notebooks and notes; every read goes through a selector with request.user."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from ninja import Router, Status
from ninja.pagination import paginate

from core.params import Id, Pagination, path_id
from core.ratelimit import rate_limit, user_key
from core.types import AuthenticatedHttpRequest
from notes import selectors, services
from notes.models import Note, Notebook, NotebookMembership, Role
from notes.schemas import (
    MemberIn,
    MemberOut,
    MemberPatch,
    NotebookIn,
    NotebookOut,
    NotebookPatch,
    NoteIn,
    NoteOut,
    NotePatch,
    OwnerIn,
)

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
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id, role=Role.OWNER)
    services.notebook_update(
        notebook=notebook, title=payload.title, description=payload.description
    )
    return selectors.notebook_get(user=request.user, notebook_id=notebook_id)


@router.delete("/notebooks/{notebook_id}", response={204: None})
def delete_notebook(request: AuthenticatedHttpRequest, notebook_id: Id) -> Status[None]:
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id, role=Role.OWNER)
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
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id, role=Role.EDITOR)
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
    note = selectors.note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
    if payload.title is not None or payload.body is not None:  # the text changes: reindexed
        rate_limit(scope="note", key=user_key(request.user))
    return services.note_update(
        note=note, title=payload.title, body=payload.body, editor=request.user
    )


@router.post("/notes/{note_id}/trash", response=NoteOut, tags=["notes"])
def trash_note(request: AuthenticatedHttpRequest, note_id: Id) -> Note:
    return services.note_trash(
        note=selectors.note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
    )


@router.post("/notes/{note_id}/restore", response=NoteOut, tags=["notes"])
def restore_note(request: AuthenticatedHttpRequest, note_id: Id) -> Note:
    return services.note_restore(
        note=selectors.note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
    )


@router.delete("/notes/{note_id}", response={204: None}, tags=["notes"])
def delete_note(request: AuthenticatedHttpRequest, note_id: Id) -> Status[None]:
    """Delete a note forever. Only trashed notes can be deleted (409 otherwise)."""
    services.note_delete(
        note=selectors.note_get(user=request.user, note_id=note_id, role=Role.EDITOR)
    )
    return Status(204, None)


# --- sharing -----------------------------------------------------------------------------------


@router.get("/notebooks/{notebook_id}/members", response=list[MemberOut], tags=["sharing"])
def list_members(
    request: AuthenticatedHttpRequest, notebook_id: Id
) -> QuerySet[NotebookMembership]:
    """Who the notebook is shared with (besides its owner, `owner` on the notebook); any
    member may see it."""
    return selectors.membership_list(user=request.user, notebook_id=notebook_id)


@router.post(
    "/notebooks/{notebook_id}/members", response={201: MemberOut, 200: MemberOut}, tags=["sharing"]
)
def add_member(
    request: AuthenticatedHttpRequest, notebook_id: Id, payload: MemberIn
) -> Status[NotebookMembership]:
    """Share with a user of this instance by username or email, as `viewer` or `editor`
    (owner only). Someone already a member gets the new role (200)."""
    notebook = selectors.notebook_get(user=request.user, notebook_id=notebook_id, role=Role.OWNER)
    existed = selectors.membership_list(user=request.user, notebook_id=notebook_id).count()
    membership = services.membership_add(
        notebook=notebook, by=request.user, identifier=payload.user, role=payload.role
    )
    after = selectors.membership_list(user=request.user, notebook_id=notebook_id).count()
    return Status(201 if after > existed else 200, membership)


@router.patch("/notebooks/{notebook_id}/members/{member_id}", response=MemberOut, tags=["sharing"])
def update_member(
    request: AuthenticatedHttpRequest, notebook_id: Id, member_id: Id, payload: MemberPatch
) -> NotebookMembership:
    """Make a member a viewer or an editor (owner only)."""
    membership = selectors.membership_get(
        user=request.user, notebook_id=notebook_id, member_id=member_id
    )
    return services.membership_set_role(membership=membership, role=payload.role)


@router.delete(
    "/notebooks/{notebook_id}/members/{member_id}", response={204: None}, tags=["sharing"]
)
def remove_member(
    request: AuthenticatedHttpRequest, notebook_id: Id, member_id: Id
) -> Status[None]:
    """Revoke a member's access (owner), or leave (a member naming themselves). Takes effect
    at once: the next request, API call and open socket of theirs find nothing of it."""
    if member_id == request.user.pk:
        membership = (
            selectors.membership_list(user=request.user, notebook_id=notebook_id)
            .filter(user=request.user)
            .first()
        )
        if membership is None:
            raise ValidationError(
                "You own this notebook: hand it to a member or delete it.", code="state"
            )
    else:
        membership = selectors.membership_get(
            user=request.user, notebook_id=notebook_id, member_id=member_id
        )
    services.membership_remove(membership=membership)
    return Status(204, None)


@router.post("/notebooks/{notebook_id}/owner", response=NotebookOut, tags=["sharing"])
def transfer_notebook(
    request: AuthenticatedHttpRequest, notebook_id: Id, payload: OwnerIn
) -> Notebook:
    """Hand the notebook to one of its members (owner only); you stay on as an editor."""
    membership = selectors.membership_get(
        user=request.user, notebook_id=notebook_id, member_id=payload.user_id
    )
    services.notebook_transfer(notebook=membership.notebook, to=membership)
    return selectors.notebook_get(user=request.user, notebook_id=notebook_id)
