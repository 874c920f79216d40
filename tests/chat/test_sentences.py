"""How the offline answerer cuts a passage into the sentences it quotes: titles and stray
words of the layout apart, words cut at line ends whole, initials and abbreviations inside."""

from __future__ import annotations

from chat.citations import quotable
from chat.grounding import sentences


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
