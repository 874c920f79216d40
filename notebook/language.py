"""Which language a document is in, and the Postgres text search configuration that fits it."""

from __future__ import annotations

import re
from functools import cache

from notebook.textutil import cjk_ratio

# ISO 639-1 → Postgres text search configurations shipped with every server.
POSTGRES_CONFIGS = {
    "ar": "arabic", "ca": "catalan", "da": "danish", "de": "german", "el": "greek",
    "en": "english", "es": "spanish", "eu": "basque", "fi": "finnish", "fr": "french",
    "ga": "irish", "hi": "hindi", "hu": "hungarian", "hy": "armenian", "id": "indonesian",
    "it": "italian", "lt": "lithuanian", "ne": "nepali", "nl": "dutch", "no": "norwegian",
    "nb": "norwegian", "pt": "portuguese", "ro": "romanian", "ru": "russian", "sr": "serbian",
    "sv": "swedish", "ta": "tamil", "tr": "turkish", "yi": "yiddish",
}  # fmt: skip
SEGMENTED = {"zh"}  # languages written without spaces that we segment with jieba
# Words indexed in a row's `search_vector` (the sum of its positions): BM25's document length.
WORD_COUNT_SQL = (
    "(SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0) "
    "FROM unnest(search_vector) AS u)"
)


def tsvector_sql(config: str, text_sql: str) -> str:
    """SQL building a tsvector of `text_sql` with the configuration given as the first
    parameter. `simple` keeps accents as typed, so unaccent makes "café" match "cafe";
    stemming configurations (english, german, …) know their accents and are left alone."""
    if config == "simple":
        return f"to_tsvector(%s::regconfig, unaccent({text_sql}))"
    return f"to_tsvector(%s::regconfig, {text_sql})"


@cache
def _identifier():  # type: ignore[no-untyped-def]
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE)


def detect_language(text: str) -> str:
    """ISO 639-1 code of the text's main language ("" when there is too little text)."""
    sample = text[:20_000]
    if len(sample.strip()) < 20:
        return ""
    if cjk_ratio(sample) > 0.3:
        # py3langid mistakes some Chinese with embedded Latin for Japanese; kana decides.
        kana = sum(1 for ch in sample if "\u3040" <= ch <= "\u30ff")
        return "ja" if kana > len(sample) * 0.05 else "zh"
    lang, _ = _identifier().classify(sample)
    return str(lang)


def search_config_for(language: str) -> str:
    """The text search configuration for a language; `simple` (+ unaccent) otherwise."""
    return POSTGRES_CONFIGS.get(language, "simple")


# Runs of Chinese characters: only these go through jieba (see segment_for_search).
_HAN_RUN = re.compile(r"([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)")


def segment_for_search(text: str, language: str) -> str:
    """Text as it goes into to_tsvector: Chinese is cut into words ("人工智能" stays one).

    Only the runs of Chinese characters go through jieba; everything between them (LaTeX
    commands, code, numbers, Latin words) is left for PostgreSQL's parser, which splits it
    as it splits any other text. jieba would read it character by character for nothing
    (a Chinese manual about LaTeX is two-thirds ASCII: 2.7 times the work) and cut Latin
    words at accented letters ("Möbius" into "M", "ö", "bius")."""
    if language in SEGMENTED or (not language and cjk_ratio(text) > 0.3):
        import jieba

        jieba.setLogLevel(60)
        parts = _HAN_RUN.split(text)
        for i in range(1, len(parts), 2):  # the odd parts are the runs the pattern matched
            parts[i] = " ".join(jieba.cut_for_search(parts[i]))
        return " ".join(parts)
    return text
