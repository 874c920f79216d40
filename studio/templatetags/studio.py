from __future__ import annotations

from django import template

from studio.rendering import stage_label as _stage_label

register = template.Library()


@register.filter
def stage_label(stage: str) -> str:
    return _stage_label(stage)
