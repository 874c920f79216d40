"""Small text helpers shared by ingestion, retrieval and chat."""

from __future__ import annotations

import re
import unicodedata

# CJK ideographs, kana and hangul: each character is roughly one token and words are not
# separated by spaces.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def cjk_ratio(text: str) -> float:
    letters = sum(1 for ch in text if not ch.isspace())
    return len(_CJK.findall(text)) / letters if letters else 0.0


def estimate_tokens(text: str) -> int:
    """A conservative token estimate for any tokenizer: CJK characters count one each,
    other words and punctuation about 1.3 each (subword splits)."""
    cjk = len(_CJK.findall(text))
    rest = _CJK.sub(" ", text)
    return cjk + round(len(_WORD.findall(rest)) * 1.3)


def clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, ending in "…" when cut: at the last space that
    fits (a title cut mid-word read "… as the surr"), or anywhere in text without spaces."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "…"


def normalize_ws(text: str) -> str:
    """NFC, with every run of whitespace collapsed to one space (for matching quotes)."""
    return " ".join(unicodedata.normalize("NFC", text).split())


# A word the layout cut at a line end: a letter, "-", the line break (and any indentation),
# then a lower-case letter ("com-\nmands", "deﬁ-\nnition").
_LINE_END_HYPHEN = re.compile(r"(?<=[^\W\d_])-[ \t]*\r?\n[ \t]*(?=[^\W\d_])")


def join_hyphenated(text: str) -> tuple[str, list[int]]:
    """`text` with the words cut at a line end whole again ("com-\\nmands" → "commands"),
    and for each of its characters the offset in `text` it comes from.

    Only before a lower-case letter: "Mid-\\nAtlantic" keeps its hyphen. A compound that
    happens to break at its own hyphen ("well-\\nknown") loses it; TeX's justified text
    breaks words far more often than it breaks compounds there (the trade PyMuPDF's
    dehyphenation makes too). Stored page text keeps the hyphens: this is for what is
    quoted and for finding those quotes in it again."""
    pieces: list[str] = []
    origin: list[int] = []
    at = 0
    for match in _LINE_END_HYPHEN.finditer(text):
        if not text[match.end()].islower():
            continue
        pieces.append(text[at : match.start()])
        origin.extend(range(at, match.start()))
        at = match.end()
    if not pieces:
        return text, list(range(len(text)))
    pieces.append(text[at:])
    origin.extend(range(at, len(text)))
    return "".join(pieces), origin


def unhyphenated(text: str) -> str:
    """`text` with the words cut at a line end whole again (see join_hyphenated), without
    the offset map: every answer runs this over each of its passages."""
    if "-" not in text:
        return text
    return _LINE_END_HYPHEN.sub(lambda m: "" if m.string[m.end()].islower() else m.group(0), text)
