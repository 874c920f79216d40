"""The name a source is shown and downloaded under, and the name its profile suggests.

The profile is intelligence's model (`intelligence.models.SourceProfile`), a layer above this
one: it is read here through its reverse relation `attachment.profile`, never imported."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from django.core.exceptions import ObjectDoesNotExist
from django.utils.text import slugify

from attachments.models import NoteAttachment

# SourceProfile.DocType values as they appear in a display name: "FlightTicket-20260312-...".
TYPE_LABELS: dict[str, str] = {
    "invoice": "Invoice",
    "receipt": "Receipt",
    "flight_ticket": "FlightTicket",
    "order_confirmation": "OrderConfirmation",
    "other": "Other",
}
SLUG_MAX = 48
# Letters NFKD does not decompose; slugify would drop them ("Bærum" -> "brum").
FOLD = str.maketrans({"æ": "ae", "Æ": "AE", "ø": "o", "Ø": "O", "ß": "ss", "đ": "d", "ł": "l"})


def file_extension(attachment: NoteAttachment) -> str:
    """The original file's extension, lower case without the dot ("pdf" when it has none)."""
    suffix = PurePosixPath(attachment.original_name or "").suffix.lower().lstrip(".")
    if suffix and suffix.isalnum() and len(suffix) <= 8:
        return suffix
    return "pdf"


def _slug(extracted: object, better_name: str, stem: str) -> str:
    """Who the document is from (vendor, merchant) when known, else its better name without
    the type it starts with (the display name says the type already): "acme-consulting-ltd",
    not "invoice-inv-2025-0042-from-acme-consulting-ltd"."""
    data = extracted if isinstance(extracted, dict) else {}
    subject = next((str(data[key]) for key in ("vendor", "merchant") if data.get(key)), "")
    slug = slugify(re.sub(r"[\W_]+", " ", (subject or better_name or stem).translate(FOLD)))
    for words in ("order-confirmation", "flight-ticket", "invoice", "receipt"):
        if slug.startswith(words + "-") and not subject:
            slug = slug[len(words) + 1 :]
            break
    return slug[:SLUG_MAX].strip("-") or "document"


def suggested_name(attachment: NoteAttachment) -> str:
    """`{DocType}-{yyyyMMdd}-{slug}-{shortId}.{ext}` from the source's profile, or "" while it
    has none whose type was recognised (`SourceProfile.recognised`: the owner's correction, or
    a confident known type). The date is the document's own when found, else the upload's; the
    short id is the first 8 hex digits of the attachment's uuid."""
    try:
        profile = attachment.profile
    except ObjectDoesNotExist:  # the relation's RelatedObjectDoesNotExist: it has none
        return ""
    if not profile.recognised:
        return ""
    label = TYPE_LABELS.get(profile.doc_type, "Other")
    day = profile.doc_date or (attachment.created_at.date() if attachment.created_at else None)
    date = day.strftime("%Y%m%d") if day else "00000000"
    stem = PurePosixPath(attachment.original_name or "").stem
    slug = _slug(profile.extracted, profile.better_name, stem)
    short_id = attachment.uuid.hex[:8]
    return f"{label}-{date}-{slug}-{short_id}.{file_extension(attachment)}"


def display_name(attachment: NoteAttachment) -> str:
    """The name a source is shown and downloaded under: the user's own file name, unless they
    accepted the suggested one (`SourceProfile.name_accepted`, an explicit action) and it is
    still recognised."""
    try:
        accepted = attachment.profile.name_accepted
    except ObjectDoesNotExist:
        return attachment.original_name
    return (suggested_name(attachment) if accepted else "") or attachment.original_name
