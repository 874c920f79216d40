from __future__ import annotations

from datetime import date, datetime
from typing import Any

from ninja import Schema


class ProfileOut(Schema):
    attachment_id: int
    status: str
    doc_type: str
    confidence: float
    better_name: str
    original_name: str
    display_name: str
    recognised: bool
    suggested_name: str
    name_accepted: bool
    doc_date: date | None
    extracted: dict[str, Any]
    edited: bool
    method: str
    timings: dict[str, Any]
    error: str
    updated_at: datetime | None


class ProfileIn(Schema):
    doc_type: str | None = None
    better_name: str | None = None
    extracted: dict[str, Any] | None = None
    name_accepted: bool | None = None
