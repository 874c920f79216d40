"""Checks an upload must pass before anything is stored: size, PDF signature, structure, page
count, the owner's quota. Deep parsing (and its hostile-file risks) is left to the worker."""

from __future__ import annotations

import hashlib
import io
import re
import unicodedata
from dataclasses import dataclass
from pathlib import PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.db.models import Sum
from django.utils.formats import number_format
from django.utils.translation import gettext

from attachments.models import NoteAttachment

if TYPE_CHECKING:
    from notebook.types import User

MB = 1024 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass
class ValidatedUpload:
    name: str
    size: int
    sha256: str
    page_count: int | None  # None when encrypted or too damaged to count here
    encrypted: bool


def clean_filename(raw: str | None) -> str:
    """The user's file name as safe metadata: no directories, no control characters, NFC."""
    name = PureWindowsPath(PurePosixPath(raw or "").name).name  # strips a/b/ and C:\\a\\b
    name = unicodedata.normalize("NFC", _CONTROL.sub("", name)).strip().strip(".")
    if not name:
        return "document.pdf"
    if len(name) > 200:
        stem, dot, ext = name.rpartition(".")
        name = (stem[:190] + "…" + dot + ext) if dot and len(ext) <= 8 else name[:200]
    return name


def download_name(name: str) -> str:
    """The name a stored file is served under: the user's name, ending in `.pdf` because what
    we serve is a PDF whatever the upload was called. The extension is appended, not swapped
    (`report.html` → `report.html.pdf`), so no part of the user's name is lost or guessed at."""
    return name if name.lower().endswith(".pdf") else f"{name}.pdf"


def _human(size: int) -> str:
    return f"{size / MB:.1f} MB" if size >= MB / 10 else f"{size / 1024:.0f} KB"


def validate_pdf_upload(*, user: User, uploaded: UploadedFile[bytes]) -> ValidatedUpload:
    """Raise ValidationError with a message naming the file unless it may be stored."""
    name = clean_filename(uploaded.name)
    size = uploaded.size or 0
    limit = settings.MAX_UPLOAD_MB * MB
    if size > limit:
        raise ValidationError(
            gettext("“%(name)s” is %(size)s; the limit is %(limit)s MB.")
            % {"name": name, "size": _human(size), "limit": settings.MAX_UPLOAD_MB},
            code="too_large",
        )
    if size == 0:
        raise ValidationError(gettext("“%(name)s” is empty.") % {"name": name}, code="empty")

    digest = hashlib.sha256()
    head = b""
    uploaded.seek(0)
    for chunk in uploaded.chunks():
        if len(head) < 1024:
            head += chunk[: 1024 - len(head)]
        digest.update(chunk)
    uploaded.seek(0)
    # The PDF signature may follow a little junk (readers accept it within the first 1 KB).
    if b"%PDF-" not in head:
        raise ValidationError(
            gettext(
                "“%(name)s” is not a PDF (its content does not start like one, whatever its name)."
            )
            % {"name": name},
            code="not_pdf",
        )

    page_count, encrypted = _inspect_structure(uploaded, name)
    if page_count is not None and page_count > settings.MAX_PDF_PAGES:
        raise ValidationError(
            gettext("“%(name)s” has %(count)s pages; the limit is %(limit)s.")
            % {
                "name": name,
                "count": number_format(page_count, force_grouping=True),
                "limit": number_format(settings.MAX_PDF_PAGES, force_grouping=True),
            },
            code="too_many_pages",
        )

    # A fast refusal only: attachment_upload checks again, authoritatively, under a lock.
    check_quota(user=user, name=name, size=size)
    return ValidatedUpload(name, size, digest.hexdigest(), page_count, encrypted)


def check_quota(*, user: User, name: str, size: int) -> None:
    """Raise ValidationError(code="quota") unless `size` more bytes fit in the user's quota.
    Only exact while the caller holds the user's upload lock (attachment_upload does)."""
    used = (
        NoteAttachment.objects.filter(uploaded_by=user).aggregate(total=Sum("size"))["total"] or 0
    )
    quota = settings.USER_QUOTA_MB * MB
    if used + size > quota:
        raise ValidationError(
            gettext(
                "“%(name)s” (%(size)s) does not fit in your storage: %(used)s of %(quota)s MB "
                "used. Delete some files first."
            )
            % {
                "name": name,
                "size": _human(size),
                "used": _human(used),
                "quota": settings.USER_QUOTA_MB,
            },
            code="quota",
        )


def _inspect_structure(uploaded: UploadedFile[bytes], name: str) -> tuple[int | None, bool]:
    """(page count, encrypted). qpdf (pikepdf) opens the file without decoding content streams;
    a file it cannot open but that has PDF objects is accepted, and the worker's real parse
    reports what is wrong with it (for example a truncated download)."""
    import pikepdf

    path = getattr(uploaded, "temporary_file_path", None)
    source = path() if path else io.BytesIO(uploaded.read())
    try:
        with pikepdf.open(source) as pdf:
            return len(pdf.pages), False  # opened without a password: nothing to ask
    except pikepdf.PasswordError:
        return None, True
    except Exception:
        uploaded.seek(0)
        sample = uploaded.read(256 * 1024)
        if not re.search(rb"\d+\s+\d+\s+obj\b", sample):
            raise ValidationError(
                gettext(
                    "“%(name)s” starts like a PDF but contains no PDF objects; it is not a "
                    "usable PDF."
                )
                % {"name": name},
                code="not_pdf",
            ) from None
        return None, False
    finally:
        uploaded.seek(0)
