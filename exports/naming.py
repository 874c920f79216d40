"""File names inside an export ZIP, made from titles and file names users typed.

A title is untrusted: it may hold slashes, `..`, control characters, bidi overrides, names
Windows reserves (CON, NUL…), hundreds of characters or nothing at all. `safe_name` makes one
path component that unpacks as itself on Linux, macOS and Windows; `Folder` keeps the names
of one folder unique (case-insensitively, as those systems compare them)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import PurePosixPath

# Bytes of UTF-8 for a name's stem: file systems allow 255 per component, and unzip tools
# add " (2)" and the extension; 120 leaves room and keeps the names readable.
STEM_MAX_BYTES = 120
# Reserved by Windows as device names, with any extension ("CON.md" too).
_RESERVED = re.compile(r"\A(con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³])(\.|\Z)", re.IGNORECASE)
# Separators, and what Windows refuses in a name.
_FORBIDDEN = re.compile(r'[/\\<>:"|?*]')
# Bidirectional controls: they make "exe.pdf" read as something else.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _visible(char: str) -> bool:
    return char not in _BIDI and unicodedata.category(char) not in ("Cc", "Cs", "Co", "Cn")


def _cap(text: str, limit: int) -> str:
    while len(text.encode()) > limit:
        text = text[:-1]
    return text


def safe_name(title: str, *, suffix: str = "", fallback: str = "untitled") -> str:
    """One path component for `title` + `suffix` (an extension such as ".md"): no path
    separators, no control or bidi characters, not "." or "..", not a Windows device name,
    at most STEM_MAX_BYTES of UTF-8 before the suffix."""
    text = unicodedata.normalize("NFC", title)
    text = "".join(c for c in text if _visible(c))
    text = _FORBIDDEN.sub("_", text)
    text = " ".join(text.split())
    # No leading dots (hidden files, "..") and no trailing dots or spaces (Windows drops them).
    text = text.lstrip(". ").rstrip(". ")
    text = _cap(text, STEM_MAX_BYTES).rstrip(". ")
    if not text:
        text = fallback
    if _RESERVED.match(text):
        text = f"_{text}"
    return text + suffix


class Folder:
    """Unique names in one folder of the archive: a second "Notes.md" becomes "Notes (2).md"."""

    def __init__(self, path: str) -> None:
        self.path = path.strip("/")
        self._taken: set[str] = set()

    def name(self, title: str, *, suffix: str = "", fallback: str = "untitled") -> str:
        """The archive path of a new file called after `title` in this folder."""
        base = safe_name(title, suffix=suffix, fallback=fallback)
        stem, ext = base[: len(base) - len(suffix)] if suffix else base, suffix
        candidate, n = base, 1
        while candidate.casefold() in self._taken:
            n += 1
            candidate = f"{stem} ({n}){ext}"
        self._taken.add(candidate.casefold())
        return f"{self.path}/{candidate}" if self.path else candidate


def source_file_name(original_name: str, extension: str) -> tuple[str, str]:
    """(stem, suffix) for an original file: its uploaded name, with the extension it is
    stored as (the detected type) whatever the name claimed."""
    name = PurePosixPath(original_name.replace("\\", "/")).name
    stem = name[: -len(extension)] if name.lower().endswith(extension) else name
    return stem, extension
