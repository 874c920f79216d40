"""Words and sentences by the text's language, from libraries (core.language): Snowball
stemmers, stopwords-iso, jieba, sentencex; and the rankers and markers that use them."""

from __future__ import annotations

from core.language import content_terms, split_sentences, stop_words
from search.snippets import query_pattern
from search.texts import hybrid_rank


def cut(text: str, language: str) -> list[str]:
    return [text[a:b] for a, b in split_sentences(text, language)]


def test_a_german_sentence_is_stemmed_as_german():
    """ "Tabellen" and "Tabelle" share a term, whether the language is given or detected."""
    assert set(content_terms("Die Tabellen", "de")) & set(content_terms("Eine Tabelle", "de"))
    plural = content_terms("Die Tabellen stehen im Anhang des Dokuments.")
    singular = content_terms("Jede Tabelle hat eine Überschrift und drei Spalten.")
    assert set(plural) & set(singular)


def test_french_stop_words_are_dropped_from_french_text():
    # Snowball's French list (as PostgreSQL ships it) has "le" and "la", not "les".
    terms = content_terms("Les fichiers de la bibliothèque sont dans le dossier")
    assert not {"de", "la", "sont", "dans"} & set(terms)
    assert set(content_terms("un fichier", "fr")) <= set(terms)  # "fichiers" stemmed alike


def test_bokmal_is_read_as_norwegian():
    assert {"og", "ikke"} <= stop_words("nb") == stop_words("no")
    assert content_terms("tabellene", "nb") == content_terms("tabellen", "no") == ["tabell"]


def test_a_language_no_library_knows_keeps_its_words_whole_and_lower_cased():
    assert stop_words("xx") == stop_words("") == frozenset()
    assert content_terms("Die Tabellen", "xx") == ["die", "tabellen"]
    assert content_terms("Die Tabellen", "") == ["die", "tabellen"]


def test_a_text_too_short_to_tell_is_read_in_the_sites_language(settings):
    settings.LANGUAGE_CODE = "de"
    assert content_terms("Die Tabellen") == ["tabell"]


def test_chinese_is_cut_into_words_without_its_stop_words():
    terms = content_terms("人工智能的发展", "zh")
    assert {"人工智能", "发展"} <= set(terms)
    assert "的" not in terms


def test_a_conversation_is_ranked_with_one_stemmer_for_query_and_items():
    """The query's language stems both sides; a query too short to tell takes the items'."""
    items: list[tuple[int, str, list[float]]] = [
        (1, "Eine Tabelle mit drei Spalten und einer Überschrift.", []),
        (2, "Noten und Takte eines Liedes für Klavier.", []),
    ]
    assert hybrid_rank("Wie formatiere ich Tabellen am besten?", items, limit=2) == [1]
    assert hybrid_rank("Tabellen", items, limit=2) == [1]


def test_a_querys_stop_words_in_its_language_are_not_marked():
    pattern = query_pattern("des fichiers de la bibliothèque")
    assert pattern is not None
    marked = {m.group(0) for m in pattern.finditer("des fichiers de la bibliothèque")}
    assert marked == {"fichiers", "bibliothèque"}


def test_a_query_of_nothing_but_stop_words_marks_them_all():
    pattern = query_pattern("what is this")
    assert pattern is not None
    assert {m.group(0) for m in pattern.finditer("so what is this")} == {"what", "is", "this"}


def test_an_abbreviation_does_not_end_a_german_sentence():
    text = "Man schreibt z. B. Noten. Das steht auf S. 12 und in Abb. 3 dazu. Am 3. Oktober kam es."
    assert cut(text, "de") == [
        "Man schreibt z. B. Noten.",
        "Das steht auf S. 12 und in Abb. 3 dazu.",
        "Am 3. Oktober kam es.",
    ]


def test_the_language_chooses_the_rules():
    """A German ordinal ("3. Oktober") ends no sentence in German; English rules cut there."""
    text = "Sie kam am 3. Oktober an. Dann ging sie."
    assert cut(text, "de") == ["Sie kam am 3. Oktober an.", "Dann ging sie."]
    assert len(cut(text, "en")) == 3


def test_bokmal_abbreviations_do_not_end_a_sentence():
    text = "Dette er f.eks. en test. Det vil si, dvs. at det går. Neste setning kommer her."
    assert cut(text, "nb") == [
        "Dette er f.eks. en test.",
        "Det vil si, dvs. at det går.",
        "Neste setning kommer her.",
    ]


def test_chinese_text_is_cut_at_its_full_stops():
    assert cut("第一句话在这里结束。第二句话也在这里！第三句呢？", "zh") == [
        "第一句话在这里结束。",
        "第二句话也在这里！",
        "第三句呢？",
    ]


def test_code_between_sentences_does_not_join_them():
    """R's "x <- 5" and a later prompt "> print(x)" are no brackets around the sentences."""
    text = "Assign it with x <- 5 first. Then type > print(x) to see it. The value is printed."
    assert cut(text, "en") == [
        "Assign it with x <- 5 first.",
        "Then type > print(x) to see it.",
        "The value is printed.",
    ]


def test_a_full_stop_before_a_lower_case_word_or_without_a_space_ends_no_sentence():
    assert cut("Call the function foo. bar is called next.", "en") == [
        "Call the function foo. bar is called next."
    ]
    assert cut("Run ../bin/R CMD check now. Then read the log.", "en") == [
        "Run ../bin/R CMD check now.",
        "Then read the log.",
    ]


def test_sentences_are_offsets_with_only_whitespace_between_them():
    text = "  First one here.\n\r\nSecond, e.g. this.  Third?\n\nno end  "
    spans = split_sentences(text, "en")
    assert [text[a:b] for a, b in spans] == [
        "First one here.",
        "Second, e.g. this.",
        "Third?",
        "no end",
    ]
    edges = [0, *(i for span in spans for i in span), len(text)]
    assert all(not text[a:b].strip() for a, b in zip(edges[::2], edges[1::2], strict=True))
    assert split_sentences("", "en") == split_sentences(" \n ", "en") == []
