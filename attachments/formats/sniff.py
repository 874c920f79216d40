"""What an Office document or e-book is, by its content, and whether its zip is safe to open.

`sniff(path)` names the format from inside the zip container, never from the file's name:
OOXML by the main part's type in `[Content_Types].xml`, OpenDocument and EPUB by the
`mimetype` member. `check_zip(path)` reads only the central directory (nothing is inflated) and
refuses a zip bomb: too many members, too much uncompressed data, a large member compressed
beyond any real document's ratio.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

# The main part's content type of each OOXML kind (documents, and their macro-enabled and
# template variants, which read the same).
OOXML_TYPES = {
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml": "docx",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml": "docx",
    "application/vnd.ms-word.document.macroEnabled.main+xml": "docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml": "pptx",
    "application/vnd.openxmlformats-officedocument.presentationml.slideshow.main+xml": "pptx",
    "application/vnd.ms-powerpoint.presentation.macroEnabled.main+xml": "pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml": "xlsx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.template.main+xml": "xlsx",
    "application/vnd.ms-excel.sheet.macroEnabled.main+xml": "xlsx",
}
MIMETYPES = {
    "application/vnd.oasis.opendocument.text": "odt",
    "application/epub+zip": "epub",
}
KINDS = ("docx", "pptx", "xlsx", "odt", "epub")

MAX_MEMBERS = 10_000  # default for FORMAT_MAX_MEMBERS
MAX_UNCOMPRESSED = 200 * 1024 * 1024  # default for FORMAT_MAX_UNCOMPRESSED, bytes
MAX_RATIO = 100  # a member inflating more than this many times its stored size …
RATIO_MIN_SIZE = 10 * 1024 * 1024  # … is refused when it inflates to at least this much
_CONTENT_TYPES_MAX = 1024 * 1024  # [Content_Types].xml is a few KB
_CT_NS = "{http://schemas.openxmlformats.org/package/2006/content-types}"

# No DTD, no entities, no network: the same rules as the readers in the child.
_PARSER = etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True, huge_tree=False)


@dataclass(frozen=True)
class ZipRefusal:
    """Why a zip container is not opened: `reason` is "members", "size" or "ratio"."""

    reason: str
    limit: int
    member: str = ""


def declared_members(path: Path) -> int | None:
    """The member count the end-of-central-directory record declares, read before zipfile
    builds one object per member; None when there is no such record (not a zip)."""
    with open(path, "rb") as fp:
        # zipfile's own reader of the end record (ZIP64 included); private but stable since 2.x
        end = zipfile._EndRecData(fp)  # type: ignore[attr-defined]
    if not end:
        return None
    return int(end[zipfile._ECD_ENTRIES_TOTAL])  # type: ignore[attr-defined]


def _open(path: Path, max_members: int) -> zipfile.ZipFile | ZipRefusal | None:
    try:
        declared = declared_members(path)
        if declared is None:
            return None
        if declared > max_members:
            return ZipRefusal("members", max_members)
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return None
    if len(archive.infolist()) > max_members:  # the record may understate the directory
        archive.close()
        return ZipRefusal("members", max_members)
    return archive


def check_zip(
    path: Path, *, max_members: int = MAX_MEMBERS, max_uncompressed: int = MAX_UNCOMPRESSED
) -> ZipRefusal | None:
    """A reason to refuse the zip at `path` from its central directory alone, or None when
    it is within the limits. A file that is not a zip is not refused here (the reader says
    it is damaged). zipfile never inflates a member past the size declared here, so these
    declared sizes bound what the readers can unpack."""
    opened = _open(path, max_members)
    if not isinstance(opened, zipfile.ZipFile):
        return opened
    with opened as archive:
        total = 0
        for info in archive.infolist():
            total += info.file_size
            if total > max_uncompressed:
                return ZipRefusal("size", max_uncompressed)
            stored = max(info.compress_size, 1)
            if info.file_size >= RATIO_MIN_SIZE and info.file_size > MAX_RATIO * stored:
                return ZipRefusal("ratio", MAX_RATIO, info.filename)
    return None


def _read_small(archive: zipfile.ZipFile, name: str, limit: int) -> bytes | None:
    try:
        info = archive.getinfo(name)
    except KeyError:
        return None
    if info.file_size > limit:
        return None
    with archive.open(info) as member:
        return member.read(limit + 1)[:limit]


def sniff(path: Path | str, *, max_members: int = MAX_MEMBERS) -> str | None:
    """ "docx", "pptx", "xlsx", "odt" or "epub" by the file's content, or None (not a zip, a
    zip of something else, a damaged or oversized directory)."""
    opened = _open(Path(path), max_members)
    if not isinstance(opened, zipfile.ZipFile):
        return None
    try:
        with opened as archive:
            mimetype = _read_small(archive, "mimetype", 200)
            if mimetype is not None:
                return MIMETYPES.get(mimetype.decode("ascii", "replace").strip())
            types = _read_small(archive, "[Content_Types].xml", _CONTENT_TYPES_MAX)
            if types is None:
                return None
            root = etree.fromstring(types, parser=_PARSER)
            for override in root.iter(f"{_CT_NS}Override"):
                kind = OOXML_TYPES.get((override.get("ContentType") or "").strip())
                if kind:
                    return kind
    except (OSError, zipfile.BadZipFile, etree.XMLSyntaxError, ValueError, EOFError):
        return None
    return None
