"""`{% upload_accept %}`: the file inputs' `accept` list, from the upload allowlist;
`{% upload_max_files %}`: how many files one upload may bring (MAX_UPLOAD_FILES)."""

from __future__ import annotations

from django import template
from django.conf import settings

from attachments.validation import upload_accept as _upload_accept

register = template.Library()


@register.simple_tag
def upload_accept() -> str:
    return _upload_accept()


@register.simple_tag
def upload_max_files() -> int:
    return settings.MAX_UPLOAD_FILES


@register.simple_tag
def upload_max_bytes() -> int:
    """The largest file an upload may be (MAX_UPLOAD_MB): the drop zones refuse a bigger
    one before sending it."""
    return int(settings.MAX_UPLOAD_MB * 1024 * 1024)
