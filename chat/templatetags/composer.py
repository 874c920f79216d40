"""Template helpers of the ask form's source selection (templates/chat/_ask_form.html)."""

from __future__ import annotations

import json
from typing import Any

from django import template

register = template.Library()


@register.filter
def as_json(value: Any) -> str:
    """`value` (a list of the selection state, or nothing) as JSON for a hidden input's value;
    the template escapes it like any other text."""
    return json.dumps(value if value is not None and value != "" else [], ensure_ascii=False)
