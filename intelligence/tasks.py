"""django-q2 entry points: thin, take ids, call one service."""

from __future__ import annotations

from intelligence import services


def build_profile(profile_id: int | str, token: int | str) -> None:
    """Build one source profile, if `token` is still its current one."""
    services.profile_build(profile_id=int(profile_id), token=int(token))
