"""The Memory panel's data for templates outside chat (the notebook page): notes' views do not
import chat (imports run chat → search → notes), so the panel fetches its own memories."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django import template

from chat.selectors import memory_list

if TYPE_CHECKING:
    from chat.models import Memory
    from notes.models import Notebook

register = template.Library()


@register.simple_tag(takes_context=True)
def notebook_memories(context: template.Context, notebook: Notebook) -> list[Memory]:
    """The signed-in user's memories of `notebook`, through the selector (only theirs)."""
    return list(memory_list(user=context["request"].user, notebook_id=notebook.pk))
