"""The storage quota (USER_QUOTA_MB): everything a user stores counts, whatever its kind.

Each app that stores a user's content registers what it counts in its AppConfig.ready()
(`register_usage`): attachments the bytes of the files a user uploaded, notes the bytes of
the notes a user wrote (which includes every Markdown or text file uploaded as a note). This
module imports none of them; it only adds up what they report.

A check is exact only under the user's storage lock (`lock_storage_of`), taken in the same
transaction that stores the content: two writes of one user then cannot together go over."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils.translation import gettext

MB = 1024 * 1024
# Bytes a user's content of one kind takes (given the user's id).
UsageCounter = Callable[[int], int]
_counters: dict[str, UsageCounter] = {}


def register_usage(name: str, counter: UsageCounter) -> None:
    """Count `counter(user_id)` bytes toward every user's quota (idempotent by `name`)."""
    _counters[name] = counter


def storage_used(*, user_id: int) -> int:
    """Bytes the user stores, over every registered kind."""
    return sum(counter(user_id) for counter in _counters.values())


def human_size(size: int) -> str:
    return f"{size / MB:.1f} MB" if size >= MB / 10 else f"{size / 1024:.0f} KB"


def lock_storage_of(*, user_id: int) -> None:
    """Serialise this user's stores until the end of the current transaction.

    The lock is the user's row, FOR NO KEY UPDATE: a second store of the same user waits here
    until the first commits or rolls back, and then (READ COMMITTED: each statement sees what
    is committed when it starts) its quota check counts the first one's bytes. NO KEY, because
    inserting rows that point to the user (notes, messages) takes FOR KEY SHARE on it, which
    this does not block; a plain FOR UPDATE would stall all of them for the insert's duration.
    Usage is summed from the rows again under the lock, so deletes (also cascades, which
    bypass our services) keep it exact.
    """
    list(
        get_user_model()
        .objects.select_for_update(no_key=True)
        .filter(pk=user_id)
        .values_list("pk", flat=True)
    )


def check_quota(*, user_id: int, name: str, size: int, freed: int = 0) -> None:
    """Raise ValidationError(code="quota") unless `size` more bytes (replacing `freed` bytes
    the user stores now, as an edit does) fit in the user's quota."""
    if size <= freed:
        return  # a store that does not grow never goes over (an edit that shortens a note)
    used = storage_used(user_id=user_id)
    quota = settings.USER_QUOTA_MB * MB
    if used - freed + size > quota:
        raise ValidationError(
            gettext(
                "“%(name)s” (%(size)s) does not fit in your storage: %(used)s of %(quota)s MB "
                "used. Delete some files first."
            )
            % {
                "name": name,
                "size": human_size(size),
                "used": human_size(used),
                "quota": settings.USER_QUOTA_MB,
            },
            code="quota",
        )
