"""`{% upload_accept %}`: the file inputs' `accept` list, from the upload allowlist."""

from __future__ import annotations

from django import template

from attachments.validation import upload_accept as _upload_accept

register = template.Library()


@register.simple_tag
def upload_accept() -> str:
    return _upload_accept()
