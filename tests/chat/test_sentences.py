"""How the offline answerer cuts a passage into the sentences it quotes: titles and stray
words of the layout apart, words cut at line ends whole, initials and abbreviations inside."""

from __future__ import annotations

from grounding.citations import quotable
from grounding.evidence import sentences


def test_a_title_paragraph_is_not_run_into_the_sentence_after_it():
    """url.pdf's "Package Option: hyphens" stands alone between blank lines; quoted as part of
    the next sentence it read "Package Option: hyphens Ordinarily, breaks are …" (and its
    first sentence "2013-09-16 The package defines …")."""
    passage = (
        "url.sty version 3.4\n\nDonald Arseneau\n\n2013-09-16\n\nThe package defines a form "
        "of verb command.\n\nPackage Option: hyphens\n\nOrdinarily, breaks are not allowed "
        "after dashes because this leads to\nconfusion. The package option allows them.\n\n"
        "A sentence the layout cut over\n\ntwo paragraphs is still one sentence here."
    )
    assert sentences(passage) == [
        "The package defines a form of verb command.",
        "Ordinarily, breaks are not allowed after dashes because this leads to confusion.",
        "The package option allows them.",
        "A sentence the layout cut over two paragraphs is still one sentence here.",
    ]


def test_a_stray_word_of_the_layout_is_not_run_into_a_sentence():
    """R-data.pdf's page 10 scatters a margin's words between its sentences: an answer read
    "… reducing memory usage. in It is possible to use sink …". A stray word between two
    sentences stands alone; a name in the margin labels the sentence after it."""
    passage = (
        "Writing them in blocks reduces memory usage.\n\nin\n\nIt is possible to use sink to "
        "divert the standard R output to a file.\nThe options(width) setting may need to be "
        "increased.\nin\n\n(The foreign package) uses write.table to produce a text file.\n\n"
        "The references can be changed to bold face instead.\n\\bibhang\nThe list of "
        "references uses a hanging indentation format.\n\nThe fields are listed here: ISBN\n"
        "ISSN\nURL and DOI are printed in a special font."
    )
    assert sentences(passage) == [
        "Writing them in blocks reduces memory usage.",
        "It is possible to use sink to divert the standard R output to a file.",
        "The options(width) setting may need to be increased.",
        "(The foreign package) uses write.table to produce a text file.",
        "The references can be changed to bold face instead.",
        "\\bibhang The list of references uses a hanging indentation format.",
        "The fields are listed here: ISBN ISSN URL and DOI are printed in a special font.",
    ]


def test_words_cut_at_a_line_end_are_quoted_whole_and_verified():
    """TeX's justified text cuts words at line ends: quotes read "commands", not "com- mands",
    and verification finds them in the page, which keeps the hyphen."""
    page = (
        "The list of characters after which line-breaks are permitted is given by the two "
        "com-\nmands (list macros) \\UrlBreaks and \\UrlBigBreaks.\nThe Mid-\nAtlantic "
        "style keeps its capital."
    )
    quoted = sentences(page)
    assert quoted[0].endswith("the two commands (list macros) \\UrlBreaks and \\UrlBigBreaks.")
    assert "Mid- Atlantic" in quoted[1]
    assert quoted[0] in quotable(page)
    assert "two com- mands" in quotable(page)  # a model quoting the page as it stands


def test_initials_and_abbreviations_do_not_end_a_sentence():
    """ "W. N. Venables", "(Donald E. Knuth)" and "e.g. Section 2" stay inside their sentence;
    "… written in R. The …" still ends one (R is a name of its own)."""
    text = (
        "An Introduction to R was written by W. N. Venables and D. M. Smith in 1990. "
        "TeX was written by a professor (Donald E. Knuth) at Stanford to typeset books. "
        "Loops can be avoided, e.g. Section 9 shows the apply family of functions. "
        "Most of the manual is written in R. The rest describes the C interface of it."
    )
    assert sentences(text) == [
        "An Introduction to R was written by W. N. Venables and D. M. Smith in 1990.",
        "TeX was written by a professor (Donald E. Knuth) at Stanford to typeset books.",
        "Loops can be avoided, e.g. Section 9 shows the apply family of functions.",
        "Most of the manual is written in R.",
        "The rest describes the C interface of it.",
    ]


def test_an_abbreviation_such_as_z_b_does_not_end_a_german_sentence():
    """German passages are cut by German rules: "z. B.", "S. 12" and "Abb. 3" stay inside."""
    text = (
        "Man schreibt z. B. Noten mit LilyPond und setzt sie. Die Seitenzahlen stehen auf "
        "S. 12 und in Abb. 3 des Anhangs."
    )
    assert sentences(text) == [
        "Man schreibt z. B. Noten mit LilyPond und setzt sie.",
        "Die Seitenzahlen stehen auf S. 12 und in Abb. 3 des Anhangs.",
    ]


def test_a_chinese_passage_is_cut_at_its_full_stops():
    text = "LaTeX 是一个排版系统。它适合排版数学公式和长篇文档！你想试试吗？"
    assert sentences(text, 1, 0.0) == [
        "LaTeX 是一个排版系统。",
        "它适合排版数学公式和长篇文档！",
        "你想试试吗？",
    ]


def test_the_language_given_sets_the_rules():
    """ "3. Oktober" ends no sentence in German; a caller that knows the language says so."""
    text = "Die neue Version kam am 3. Oktober heraus. Sie behebt viele Fehler beim Satz."
    assert len(sentences(text, 1, 0.0, language="de")) == 2
    assert len(sentences(text, 1, 0.0, language="en")) == 3


def test_sentence_bounds_are_offsets_into_the_text():
    """An answer's sentences keep their place (chat.claims): offsets into the text given,
    only whitespace between them, cut by the text's language."""
    from grounding.evidence import sentence_bounds

    text = "Wir nutzen z. B. Noten hier [1].  Dann kommt der Rest des Satzes [2]."
    bounds = sentence_bounds(text)
    assert [text[a:b] for a, b in bounds] == [
        "Wir nutzen z. B. Noten hier [1].",
        "Dann kommt der Rest des Satzes [2].",
    ]
    assert not text[bounds[0][1] : bounds[1][0]].strip()
