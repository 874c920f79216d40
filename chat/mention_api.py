"""The composer's mention suggestions for API clients (the page uses chat.mention_views)."""

from __future__ import annotations

from typing import Literal

from ninja import Router, Schema

from chat.mentions import Suggestion, suggest
from core.params import Id
from core.types import AuthenticatedHttpRequest
from notes.selectors import notebook_get

router = Router(tags=["chat"])


class MentionOut(Schema):
    kind: Literal["note", "file", "folder"]
    ref: str
    name: str
    path: str
    count: int
    url: str = ""
    warning: str = ""
    refused: bool = False


@router.get("/notebooks/{notebook_id}/mentions", response=list[MentionOut])
def list_mentions(
    request: AuthenticatedHttpRequest, notebook_id: Id, q: str = "", all: bool = False
) -> list[Suggestion]:
    """Sources to mention from this notebook, best first: its notes (`all=false`, like `@q`)
    or every note, ready PDF and non-empty notebook of yours (`all=true`, like `@@q`). Each
    `ref` can be sent back in a question's selections."""
    notebook = notebook_get(user=request.user, notebook_id=notebook_id)
    return list(suggest(user=request.user, notebook=notebook, term=q[:200], everything=all))
