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


def normalize_ws(text: str) -> str:
    """NFC, with every run of whitespace collapsed to one space (for matching quotes)."""
    return " ".join(unicodedata.normalize("NFC", text).split())
