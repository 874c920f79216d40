"""mark_quote: the first whitespace-insensitive occurrence of a cited quote in a page's text,
marked in escaped HTML, in time linear in page + quote."""

from __future__ import annotations

import random
import re

import pytest

from attachments.views import mark_quote


def regex_mark_quote(text: str, quote: str) -> tuple[int, int] | None:
    """The span the original implementation marked: the quote's words joined by \\s+."""
    words = quote.split()
    if not words:
        return None
    match = re.search(r"\s+".join(re.escape(word) for word in words), text)
    return match.span() if match else None


def marked_span(text: str, quote: str) -> tuple[int, int] | None:
    html = mark_quote(text, quote)
    if html is None:
        return None
    # Escaping is undone to compare offsets; only <mark> itself is markup.
    head, rest = str(html).split('<mark id="quote">')
    inside, _ = rest.split("</mark>")
    start = len(unescape(head))
    return start, start + len(unescape(inside))


def unescape(html: str) -> str:
    for entity, char in [("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#x27;", "'")]:
        html = html.replace(entity, char)
    return html.replace("&amp;", "&")


def test_marks_the_quote_across_any_whitespace_and_escapes_the_page():
    text = "<b>Intro</b> & then:\n  the   cited\tquote\r\nends here. the cited quote"
    html = mark_quote(text, " the cited quote ")
    assert html == (
        "&lt;b&gt;Intro&lt;/b&gt; &amp; then:\n  "
        '<mark id="quote">the   cited\tquote</mark>\r\nends here. the cited quote'
    )


def test_absent_or_empty_quotes_mark_nothing():
    assert mark_quote("the cited quote", "the quote") is None
    assert mark_quote("the cited quote", " \n\t") is None
    assert mark_quote("the cited quote", "") is None
    assert mark_quote("", "quote") is None
    assert mark_quote("the citedquote", "cited quote") is None  # words need whitespace between


def test_words_may_be_parts_of_page_words_and_unicode_spaces_count():
    # As before: the quote's words are matched as text, not as whole words.
    assert marked_span("xxcited quoteyy", "cited quote") == (2, 13)
    assert marked_span("a\u00a0b\u3000\u2028c", "a b c") == (0, 6)
    assert marked_span("a\x1cb", "a b") == (0, 3)  # a separator str.split() splits on


def test_the_same_spans_as_the_regex_it_replaces_on_random_pages():
    rng = random.Random(20240601)  # noqa: S311 - test data
    alphabet = ["a", "b", "ab", "<", "&", "é"]
    spaces = [" ", "  ", "\n", "\t ", "\u00a0", "\r\n"]
    for _ in range(3000):
        words = [rng.choice(alphabet) for _ in range(rng.randint(0, 30))]
        text = rng.choice(["", " ", "\n"]) + "".join(
            word + rng.choice(spaces) for word in words
        ).rstrip(rng.choice(["", " "]))
        if words and rng.random() < 0.7:
            first = rng.randrange(len(words))
            quote = " ".join(words[first : first + rng.randint(1, 6)])
        else:
            quote = " ".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4)))
        if rng.random() < 0.2:
            quote = "\n " + quote.replace(" ", rng.choice(spaces)) + " "
        assert marked_span(text, quote) == regex_mark_quote(text, quote), (text, quote)


@pytest.mark.parametrize("separator", [" ", "\n  "])
def test_a_quote_that_almost_matches_everywhere_on_a_long_page(separator):
    """80 KB of one word repeated and a 2 KB quote of it that differs at its last word: the
    regex retried the quote at every word of the page (about a second). Correct, and the
    occurrence at the very end is found."""
    page = separator.join(["a"] * 40_001)
    quote = " ".join(["a"] * 999 + ["b"])
    assert len(page) >= 80_000
    assert len(quote) == 1999  # the view keeps 2,000 characters of a quote
    assert mark_quote(page, quote) is None

    ending = page + separator + "b"
    span = marked_span(ending, quote)
    assert span is not None
    assert ending[span[0] : span[1]].split() == quote.split()
    assert ending[span[0] - 1].isspace()
    assert span[1] == len(ending)


def test_the_quote_is_never_turned_into_a_regex(monkeypatch):
    """Linear by construction: the quote goes to str.find, not to the regex engine (whose
    search of a quote-shaped pattern restarts at every position of the page)."""
    patterns: list[str] = []
    for name in ["compile", "search", "match", "fullmatch", "finditer", "findall", "sub"]:
        real = getattr(re, name)

        def spy(pattern, *args, _real=real, **kwargs):
            patterns.append(str(getattr(pattern, "pattern", pattern)))
            return _real(pattern, *args, **kwargs)

        monkeypatch.setattr(re, name, spy)
    assert mark_quote("one two  three four", "two three") is not None
    assert mark_quote("one two  three four", "two four") is None
    assert not [p for p in patterns if "two" in p]


def test_a_quote_of_a_word_cut_at_a_line_end_is_marked_over_the_hyphen():
    """The offline answer quotes "commands" where the page has "com-\\nmands": the mark spans
    the cut word as the page shows it."""
    text = "given by the two com-\nmands (list macros) \\UrlBreaks. Mid-\nAtlantic."
    assert marked_span(text, "given by the two commands (list macros)") == (0, 41)
    assert marked_span(text, "two com- mands") == (13, 27)  # as a model may quote it
    assert marked_span(text, "MidAtlantic") is None  # only before a lower-case letter
