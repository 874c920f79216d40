"""`{{ question|asked }}`: a guide's suggested question in the reader's language."""

from __future__ import annotations

from django import template

from guides.services.content import shown

register = template.Library()
register.filter("asked", shown)
