from __future__ import annotations

from ninja import Router, Schema

from core.types import AuthenticatedHttpRequest

router = Router(tags=["account"])


class MeOut(Schema):
    id: int
    username: str


@router.get("/me", response=MeOut)
def retrieve_me(request: AuthenticatedHttpRequest) -> MeOut:
    """Who the API sees you as; a cheap way to check a token."""
    return MeOut(id=request.user.pk, username=request.user.get_username())
