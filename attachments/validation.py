"""Checks an upload must pass before anything is stored: its type (by extension, against one
allowlist), size, PDF signature, structure, page count, the owner's quota; for text files,
their encoding. Deep parsing of PDFs (and its hostile-file risks) is left to the worker."""

from __future__ import annotations

import hashlib
import io
import re
import tempfile
import unicodedata
import warnings
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.utils.formats import number_format
from django.utils.translation import gettext

from attachments.formats import registry
from core import quota

if TYPE_CHECKING:
    from core.types import User

MB = 1024 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class SourceKind(StrEnum):
    PDF = "pdf"  # stored as a file, hashed as bytes, ingested by the worker
    TEXT = "text"  # becomes a note: decoded, normalised, hashed as text
    IMAGE = "image"  # stored as a file like a PDF, hashed as bytes, OCR'd by the worker
    # An Office document, e-book, HTML file, transcript or audio file (attachments.formats):
    # stored as a file, hashed as bytes, its format decided by content, read into units.
    FORMAT = "format"


# What may be uploaded, by extension (lower case): the one place that says so. Everything
# else is refused before anything is stored. An image's extension only routes it: its
# content decides (validate_image_upload).
UPLOAD_TYPES: dict[str, SourceKind] = {
    ".pdf": SourceKind.PDF,
    ".md": SourceKind.TEXT,
    ".txt": SourceKind.TEXT,
    ".jpg": SourceKind.IMAGE,
    ".jpeg": SourceKind.IMAGE,
    ".png": SourceKind.IMAGE,
    ".gif": SourceKind.IMAGE,
    ".webp": SourceKind.IMAGE,
}
# Media types a browser's file picker may offer besides the extensions (the `accept` list).
UPLOAD_MEDIA_TYPES = (
    "application/pdf",
    "text/markdown",
    "text/plain",
    "image/jpeg",
    "image/png",
    "image/gif",
    "image/webp",
)
# Image formats accepted (as Pillow detects them from the content) → the extension and media
# type the stored file is kept and served under, whatever the upload was called.
IMAGE_FORMATS: dict[str, tuple[str, str]] = {
    "JPEG": (".jpg", "image/jpeg"),
    "PNG": (".png", "image/png"),
    "GIF": (".gif", "image/gif"),
    "WEBP": (".webp", "image/webp"),
}


def upload_batch_limit_error(count: int) -> ValidationError | None:
    """A refusal naming the limit when one request brings more than MAX_UPLOAD_FILES files
    (nothing of such a batch is stored), else None."""
    limit = settings.MAX_UPLOAD_FILES
    if count <= limit:
        return None
    return ValidationError(
        gettext("%(count)s files at once is too many: add at most %(limit)s files at a time.")
        % {"count": count, "limit": limit},
        code="too_many_files",
    )


def _format_extensions() -> list[str]:
    return sorted({ext for fmt in registry.formats() for ext in fmt.extensions})


def upload_accept() -> str:
    """The file inputs' `accept` attribute: the allowlist's extensions and media types."""
    media = [m for fmt in registry.formats() for m in fmt.media_types]
    return ",".join(dict.fromkeys([*UPLOAD_MEDIA_TYPES, *media, *UPLOAD_TYPES,
                                   *_format_extensions()]))  # fmt: skip


def accepted_extensions() -> list[str]:
    """Every extension an upload may have, for messages."""
    return [*UPLOAD_TYPES, *_format_extensions()]


def upload_kind(raw_name: str | None) -> SourceKind:
    """The kind of source a file of this name becomes; ValidationError(code="file_type"),
    naming the file and what is accepted, for any extension not on the allowlist."""
    name = clean_filename(raw_name)
    extension = PurePosixPath(name).suffix.lower()
    kind = UPLOAD_TYPES.get(extension)
    if kind is None and registry.by_extension(extension):
        kind = SourceKind.FORMAT
    if kind is None:
        raise ValidationError(
            gettext("“%(name)s” cannot be added: only %(types)s files are accepted.")
            % {"name": name, "types": ", ".join(accepted_extensions())},
            code="file_type",
        )
    return kind


@dataclass
class ValidatedUpload:
    name: str
    size: int
    sha256: str
    page_count: int | None  # None when encrypted or too damaged to count here
    encrypted: bool
    kind: str = "pdf"  # NoteAttachment.Kind
    extension: str = ".pdf"  # what the file is stored and served as
    format: str = ""  # NoteAttachment.format (attachments.formats.registry)


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


def download_name(name: str, extension: str = ".pdf") -> str:
    """The name a stored file is served under: the user's name, ending in the extension of
    what we serve (`.pdf` for a PDF, the detected format's for an image) whatever the upload
    was called. The extension is appended, not swapped (`report.html` → `report.html.pdf`),
    so no part of the user's name is lost or guessed at; `.jpeg` passes for `.jpg`."""
    lower = name.lower()
    if lower.endswith(extension) or (extension == ".jpg" and lower.endswith(".jpeg")):
        return name
    return f"{name}{extension}"


def _human(size: int) -> str:
    return quota.human_size(size)


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
    """Raise ValidationError(code="quota") unless `size` more bytes fit in the user's quota
    (core.quota: files, notes and text sources all count). Only exact while the caller holds
    the user's storage lock (attachment_upload does)."""
    quota.check_quota(user_id=user.pk, name=name, size=size)


def _inspect_structure(uploaded: UploadedFile[bytes], name: str) -> tuple[int | None, bool]:
    """(page count, encrypted). qpdf (pikepdf) opens the file without decoding content streams;
    a file it cannot open but that has PDF objects is accepted, and the worker's real parse
    reports what is wrong with it (for example a truncated download)."""
    # pikepdf (qpdf) only when a PDF is uploaded, not at web start-up
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


@dataclass
class ValidatedText:
    name: str
    size: int
    text: str  # decoded and normalised (see normalise_text): what the note's body becomes
    sha256: str  # of the normalised text, UTF-8


# Control characters a text file does not contain (tab, line feed, vertical tab, form feed
# and carriage return are text); NUL above all is the mark of a binary file.
_BINARY = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_BOMS = (
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)


def normalise_text(text: str) -> str:
    """The form a text source is stored and hashed in: line ends as \\n, Unicode NFC, no
    leading or trailing blank space. Two files that differ only in those hash the same.
    (notes.text_sha256_sql computes the same in SQL over stored notes.)"""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return unicodedata.normalize("NFC", text).strip(TEXT_STRIP)


TEXT_STRIP = " \t\n\v\f"


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def validate_text_upload(*, uploaded: UploadedFile[bytes]) -> ValidatedText:
    """Raise ValidationError with a message naming the file unless it is text a note can hold:
    not too large, UTF-8 (a UTF-8 or UTF-16 byte order mark is honoured), not binary, not blank,
    within a note's length."""
    name = clean_filename(uploaded.name)
    size = uploaded.size or 0
    limit = settings.MAX_UPLOAD_MB * MB
    if size > limit:
        raise ValidationError(
            gettext("“%(name)s” is %(size)s; the limit is %(limit)s MB.")
            % {"name": name, "size": _human(size), "limit": settings.MAX_UPLOAD_MB},
            code="too_large",
        )
    if size > 4 * settings.NOTE_BODY_MAX_CHARS + 4:  # more characters than that, surely
        raise _too_long(name)
    uploaded.seek(0)
    data = b"".join(uploaded.chunks())
    uploaded.seek(0)
    encoding = "utf-8"
    for bom, bom_encoding in _BOMS:
        if data.startswith(bom):
            data, encoding = data[len(bom) :], bom_encoding
            break
    try:
        raw = data.decode(encoding)
    except UnicodeDecodeError:
        raw = None
    if raw is None or _BINARY.search(raw):
        raise ValidationError(
            gettext(
                "“%(name)s” is not readable text: it is not UTF-8 or it contains binary data. "
                "Save it as UTF-8 text and try again."
            )
            % {"name": name},
            code="not_text",
        )
    text = normalise_text(raw)
    if not text:
        raise ValidationError(gettext("“%(name)s” is empty.") % {"name": name}, code="empty")
    if len(text) > settings.NOTE_BODY_MAX_CHARS:
        raise _too_long(name)
    return ValidatedText(name, size, text, text_sha256(text))


def _too_long(name: str) -> ValidationError:
    return ValidationError(
        gettext("“%(name)s” is too long for a note: a note holds at most %(limit)s characters.")
        % {
            "name": name,
            "limit": number_format(settings.NOTE_BODY_MAX_CHARS, force_grouping=True),
        },
        code="too_long",
    )


def _not_an_image(name: str) -> ValidationError:
    return ValidationError(
        gettext(
            "“%(name)s” is not a JPEG, PNG, GIF or WebP image (its content is not one, "
            "whatever its name)."
        )
        % {"name": name},
        code="not_image",
    )


def validate_image_upload(*, user: User, uploaded: UploadedFile[bytes]) -> ValidatedUpload:
    """Raise ValidationError with a message naming the file unless it is an image we accept,
    judged by its content (Pillow opens and verifies it; a `.png` that is a JPEG is fine, one
    that is a PDF or text is not), within the size cap and IMAGE_MAX_PIXELS (a decompression
    bomb is refused from its header, before any pixel is decoded), and the quota."""
    # Pillow only when an image is uploaded
    from PIL import Image

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
    uploaded.seek(0)
    for chunk in uploaded.chunks():
        digest.update(chunk)
    uploaded.seek(0)
    path = getattr(uploaded, "temporary_file_path", None)
    try:
        source = path() if path else io.BytesIO(uploaded.read())
        # Formats limited to those we accept: Pillow does not even try the others' parsers.
        # Between its own cap and twice that, Pillow only warns: ours is checked below.
        with (
            warnings.catch_warnings(action="ignore", category=Image.DecompressionBombWarning),
            Image.open(source, formats=list(IMAGE_FORMATS)) as image,
        ):
            detected = image.format or ""
            width, height = image.size
            if detected in IMAGE_FORMATS and width * height <= settings.IMAGE_MAX_PIXELS:
                image.verify()
    except Image.DecompressionBombError:  # far over Pillow's own cap: a bomb
        raise _too_many_pixels(name) from None
    except Exception:  # UnidentifiedImageError, or a file its parser chokes on
        raise _not_an_image(name) from None
    finally:
        uploaded.seek(0)
    if detected not in IMAGE_FORMATS:
        raise _not_an_image(name)
    if width * height > settings.IMAGE_MAX_PIXELS:
        raise _too_many_pixels(name)
    check_quota(user=user, name=name, size=size)
    extension = IMAGE_FORMATS[detected][0]
    return ValidatedUpload(name, size, digest.hexdigest(), 1, False, "image", extension)


def _too_many_pixels(name: str) -> ValidationError:
    return ValidationError(
        gettext("“%(name)s” has too many pixels: the limit is %(limit)s megapixels.")
        % {
            "name": name,
            "limit": number_format(settings.IMAGE_MAX_PIXELS / 1_000_000, decimal_pos=0),
        },
        code="too_many_pixels",
    )


def validate_format_upload(*, user: User, uploaded: UploadedFile[bytes]) -> ValidatedUpload:
    """Raise ValidationError with a message naming the file unless it is one of the registered
    formats its extension names (attachments.formats.registry), judged by its content (a
    `.docx` that is a PDF or a random zip is refused), within the size cap and the quota,
    and the format is usable here (audio needs a transcription server)."""
    name = clean_filename(uploaded.name)
    extension = PurePosixPath(name).suffix.lower()
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
    uploaded.seek(0)
    with tempfile.NamedTemporaryFile(suffix=extension) as copy:
        for chunk in uploaded.chunks():
            digest.update(chunk)
            copy.write(chunk)
        copy.flush()
        uploaded.seek(0)
        fmt = registry.format_for(Path(copy.name), extension)
    if fmt is None:
        # The formats' labels are msgids (gettext_noop where they are registered).
        labels = gettext(" or ").join(
            sorted({gettext(f.label) for f in registry.by_extension(extension)})
        )
        raise ValidationError(
            gettext("“%(name)s” is not a real %(what)s: its content is something else.")
            % {"name": name, "what": labels or extension},
            code="file_type",
        )
    if refusal := fmt.refusal():
        raise ValidationError(f"“{name}”: {refusal}", code="unavailable")
    check_quota(user=user, name=name, size=size)
    return ValidatedUpload(
        name, size, digest.hexdigest(), None, False, fmt.kind, extension, fmt.name
    )
