"""Ids and numbers from a request, read strictly, and the text a request may hold.

An id is ASCII decimal digits naming 1 … BIGINT_MAX: `str.isdigit()` also accepts "²" (which
`int()` then refuses), `int()` accepts "١٢", " 12", "+12" and "1_2" (and refuses thousands of
digits), and a number past PostgreSQL's bigint makes the query fail. Pages read query and form
ids with `parse_id`; the API declares them `Id` (pydantic answers 422 for anything else) and
paginates with `Pagination`.

Text holding a C0 control character (CONTROL_CHARACTERS) is refused: by
notebook.middleware.RefuseControlCharacters for every request, and by the services that take
text some other way (a question over the socket, JSON typed into a form)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from django.utils.translation import gettext_lazy
from ninja import Field, Schema
from ninja.conf import settings as ninja_settings
from ninja.pagination import LimitOffsetPagination
from ninja.params.functions import Path, Query

BIGINT_MAX = 2**63 - 1  # PostgreSQL's bigint: our primary keys, LIMIT and OFFSET
_ID = re.compile(r"[0-9]{1,19}")  # 19 digits hold BIGINT_MAX


def parse_id(raw: object) -> int | None:
    """`raw` (a query or form value) as an id, or None when it is missing or cannot be one."""
    if not isinstance(raw, str) or not _ID.fullmatch(raw):
        return None
    value = int(raw)
    return value if 1 <= value <= BIGINT_MAX else None


Id = Annotated[int, Field(ge=1, le=BIGINT_MAX)]


# Behind @paginate, whose wrapper looks the names of postponed annotations up in ninja's module
# (where `Id` is unknown), an id is an `int` bounded by its default instead:
# `notebook_id: int = path_id()`, `note_id: int | None = query_id()`.
def path_id() -> Any:
    return Path(..., ge=1, le=BIGINT_MAX)


def query_id() -> Any:
    return Query(None, ge=1, le=BIGINT_MAX)


class Pagination(LimitOffsetPagination):
    """ninja's limit/offset pagination with both numbers bounded where PostgreSQL's LIMIT and
    OFFSET end (past them every query failed): 422 beyond, as for any other bad parameter."""

    class Input(Schema):
        limit: int = Field(ninja_settings.PAGINATION_PER_PAGE, ge=1, le=BIGINT_MAX)
        offset: int = Field(0, ge=0, le=BIGINT_MAX)


# C0 control characters but the whitespace ones (tab, line feed, vertical tab, form feed,
# carriage return: forms send CRLF, and a text file turned note may hold form feeds) — the
# characters an uploaded text file is refused for (attachments.validation). PostgreSQL cannot
# store NUL in text at all; the others have no business in a title, note or question.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0e-\x1f]")
CONTROL_CHARACTERS_REFUSED = gettext_lazy(
    "The text sent contains a control character (such as a NUL byte), which no field accepts. "
    "Remove it and try again."
)


def has_control_characters(text: str) -> bool:
    return CONTROL_CHARACTERS.search(text) is not None


def holds_control_characters(value: Any) -> bool:
    """Whether a decoded JSON value has a control character in any string, key or value, at
    any depth (walked without recursion: json.loads accepts deeper nesting than a recursive
    walk could follow)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if has_control_characters(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False
