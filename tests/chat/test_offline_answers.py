"""Offline answers people can read: one passage of one place of one source, grown from its best
sentence to the unit of the page that holds it and shown with its structure; further passages
listed under it; a plain abstention with the closest matches when the evidence is weak; names
the sources never mention refused; citations run 1..n. The inputs are made for each behaviour."""

from __future__ import annotations

import re

import pytest
from django.utils import translation

from attachments.models import DocumentChunk, DocumentPage, NoteAttachment
from chat import extractive, services
from chat.passages import (
    CODE,
    DEBRIS,
    HEADING,
    LIST,
    PROSE,
    escape,
    grow,
    kind_of,
    real_heading,
    render,
)
from chat.rendering import present
from chat.tools import AnswerRequest
from core.markdown import plain_text, render_markdown
from grounding.citations import renumber
from grounding.evidence import Candidate, Evidence, salient_terms, weigh
from notes.services import note_create
from tests.factories import NotebookFactory
from tests.fixtures.answers import QUESTION, answer, ask_notes

pytestmark = pytest.mark.django_db


def page_passage(user, text: str, *, running: list[list[int]] | None = None) -> dict[str, object]:
    """A document passage whose page holds `text` (a chunk covering the whole page)."""
    notebook = NotebookFactory.create(owner=user, title="Pages")
    note = note_create(notebook=notebook, author=user, title="A manual")
    attachment = NoteAttachment.objects.create(
        note=note, uploaded_by=user, file="manual.pdf", original_name="manual.pdf", size=1,
        sha256="0" * 64, status=NoteAttachment.Status.READY, page_count=1,
    )  # fmt: skip
    DocumentPage.objects.create(attachment=attachment, number=1, text=text, running=running or [])
    chunk = DocumentChunk.objects.create(
        attachment=attachment, index=0, page_number=1, content=text, start_char=0,
        end_char=len(text), char_count=len(text), token_count=len(text.split()),
    )  # fmt: skip
    return {"n": 1, "kind": "document", "chunk_id": chunk.pk, "attachment_id": attachment.pk,
            "file": "manual.pdf", "page": 1, "heading": "", "text": text}  # fmt: skip


def best(text: str, score: float = 0.8) -> tuple[Candidate, Evidence]:
    candidate = Candidate(1, 0, 0, text, similarity=score, coverage=score)
    return candidate, Evidence(ranked=[candidate])


# --- What a block of a page is, read from its layout


@pytest.mark.parametrize(
    ("block", "kind"),
    [
        ('read.table("intro.dat", fileEncoding = "UTF-8")', CODE),
        ("> z <- c(1:3,NA); ind <- is.na(z)\n> z[ind]", CODE),
        ("• one thing to say\n• and another one, which goes on\nover two lines", LIST),
        ("2.6 Character vectors", HEADING),
        ("in", DEBRIS),
        ("Missing values are sometimes printed as <NA> when character vectors are printed.", PROSE),
        ("computation, the so-called Not a Number, NaN, values. Examples are", PROSE),
    ],
)
def test_a_block_is_told_by_its_layout(block, kind):
    assert kind_of(block) == kind


def test_a_heading_is_told_from_a_line_of_text_by_its_font():
    assert kind_of("Other looping facilities include the", emphasis=False) == PROSE
    assert kind_of("Other looping facilities", emphasis=True) == HEADING


# --- The unit that holds the best sentence


def test_a_lead_in_brings_the_code_it_introduces_as_a_code_block(alice):
    page = (
        "12. Encoding\n\n"
        "The encoding can be given by the fileEncoding argument, for example:\n\n"
        'read.table("intro.dat", fileEncoding = "UTF-8")\n\n'
        "Another paragraph about something else entirely, which is not part of it."
    )
    passage = page_passage(alice, page)
    candidate, evidence = best(
        "The encoding can be given by the fileEncoding argument, for example:"
    )
    unit = grow(candidate, evidence, [passage])
    assert unit is not None
    markdown = render(unit)
    assert '```\nread.table("intro.dat", fileEncoding = "UTF-8")\n```' in markdown
    assert markdown.startswith("**12\\. Encoding**")
    assert "something else entirely" not in markdown
    assert unit.quote == candidate.text


def test_a_sentence_carried_over_a_blank_line_stays_one_paragraph_with_its_examples(alice):
    """Extraction leaves blank lines inside paragraphs; a block that does not end a sentence
    goes on into the next, and code between such blocks is part of the passage."""
    page = (
        "Note that there is a second kind of missing values which are produced by numerical\n\n"
        "computation, the so-called Not a Number, NaN, values. Examples are\n\n"
        "> 0/0\n\nor\n\n> Inf - Inf\n\n"
        "which both give NaN since the result cannot be defined sensibly.\n\n"
        "Character quantities are used frequently in R, for example as plot labels."
    )
    passage = page_passage(alice, page)
    candidate, evidence = best(
        "Note that there is a second kind of missing values which are produced by numerical "
        "computation, the so-called Not a Number, NaN, values."
    )
    unit = grow(candidate, evidence, [passage])
    assert unit is not None
    markdown = render(unit)
    assert markdown.startswith("Note that there is a second kind of missing values which are "
                               "produced by numerical computation, the so-called")  # fmt: skip
    assert "```\n> 0/0\n```" in markdown
    assert "```\n> Inf - Inf\n```" in markdown
    assert "which both give NaN" in markdown
    assert "Character quantities" not in markdown
    # No prompt runs into prose: every "> " line is inside a code block.
    for line in markdown.splitlines():
        assert not line.startswith(">") or "```" in markdown.split(line)[0].rsplit("\n\n", 1)[-1]


def test_list_items_are_shown_as_a_list(alice):
    page = (
        "R searches for startup files in turn:\n\n"
        "• Unless --no-environ was given, R searches for user and site files to process.\n\n"
        "• Then R searches for the site-wide startup profile unless told otherwise.\n\n"
        "• It also loads a saved workspace from file .RData if there is one\n\n"
        "(unless --no-restore was specified)."
    )
    passage = page_passage(alice, page)
    candidate, evidence = best("It also loads a saved workspace from file .RData if there is one "
                               "(unless --no-restore was specified).")  # fmt: skip
    unit = grow(candidate, evidence, [passage])
    assert unit is not None
    items = [line for line in render(unit).splitlines() if line.startswith("- ")]
    assert len(items) == 3
    assert items[-1].endswith("(unless --no-restore was specified).")
    assert "•" not in render(unit)


def test_running_heads_and_margin_words_are_left_out(alice):
    page = (
        "Chapter 2: Spreadsheet-like data\n\n10\n\n"
        "It is possible to use sink to divert the standard R output to a file.\nin"
    )
    head = page.index("Chapter")
    passage = page_passage(alice, page, running=[[head, head + 32], [34, 36]])
    candidate, evidence = best(
        "It is possible to use sink to divert the standard R output to a file."
    )
    unit = grow(candidate, evidence, [passage])
    assert unit is not None
    assert render(unit) == "It is possible to use sink to divert the standard R output to a file."


def test_a_block_too_long_to_show_whole_is_cut_around_the_best_sentence(alice):
    filler = " ".join(f"Sentence number {i} says something of its own here." for i in range(60))
    page = f"{filler} The one sentence that answers the question is this one. {filler}"
    passage = page_passage(alice, page)
    candidate, evidence = best("The one sentence that answers the question is this one.")
    unit = grow(candidate, evidence, [passage])
    assert unit is not None
    assert candidate.text in unit.text
    assert len(unit.text) < len(page) / 2


# --- Through the answerer


def _next_page(passage: dict[str, object], text: str, running: list[list[int]]) -> None:
    attachment = NoteAttachment.objects.get(pk=int(str(passage["attachment_id"])))
    attachment.page_count = 2
    attachment.save(update_fields=["page_count"])
    DocumentPage.objects.create(attachment=attachment, number=2, text=text, running=running)


def test_a_passage_the_page_break_cuts_goes_on_at_the_top_of_the_next_page(alice):
    page = (
        "Counting birds\n\n"
        "The survey counted the herons twice a day. At dawn it found forty birds on the\n"
        "millpond, whereas\n\n"
        'count(herons, at = "dusk")'
    )
    passage = page_passage(alice, page)
    head = "Chapter 2: Birds\n\n12\n\n"
    _next_page(
        passage,
        head + "gave only twelve, most of them on the weir.\n\nOtters are counted in spring.",
        [[0, 16], [18, 20]],
    )
    candidate, evidence = best("The survey counted the herons twice a day.")
    unit = grow(candidate, evidence, [passage])
    assert unit is not None
    assert unit.last_page == 2
    markdown = render(unit)
    assert '```\ncount(herons, at = "dusk")\n```' in markdown
    assert markdown.endswith("gave only twelve, most of them on the weir.")
    assert "Chapter 2" not in markdown
    assert "Otters" not in markdown
    assert unit.quote == candidate.text  # the citation's quote stays on its own page
    with translation.override("de"):
        assert extractive._frame(passage, unit.last_page) == "Aus manual.pdf, Seiten 1–2:"
    assert extractive._frame(passage, unit.last_page) == "From manual.pdf, pages 1–2:"


def test_a_passage_that_ends_with_its_page_stays_on_it(alice):
    page = "Counting birds\n\nThe survey counted the herons twice a day, at dawn and at dusk."
    passage = page_passage(alice, page)
    _next_page(passage, "Otters are counted in spring, on the weir.", [])
    candidate, evidence = best("The survey counted the herons twice a day, at dawn and at dusk.")
    unit = grow(candidate, evidence, [passage])
    assert unit is not None
    assert unit.last_page is None
    assert "Otters" not in render(unit)
    assert extractive._frame(passage, unit.last_page) == "From manual.pdf, page 1:"


def test_a_slide_or_section_is_not_continued_from_the_next_one(alice):
    """Only printed pages break a passage: the units of other formats (a slide, a sheet
    range, a section, a time) are whole."""
    page = "Counting birds\n\nThe survey counted the herons twice a day. At dawn, forty, and"
    passage = page_passage(alice, page)
    passage["where"] = "Slide 1: Counting birds"
    _next_page(passage, "otters at dusk, on the weir.", [])
    candidate, evidence = best("The survey counted the herons twice a day.")
    unit = grow(candidate, evidence, [passage])
    assert unit is not None
    assert unit.last_page is None
    assert "otters" not in render(unit)


def test_an_answer_is_one_passage_of_one_source_framed_and_highlighted(alice):
    done = ask_notes(
        alice,
        [
            ("Reading data", "Use read.csv() to read a comma separated file into a data frame. "
                             "The first line holds the column names."),
            ("Plots", "A histogram shows how the values of a numeric vector are spread. "
                      "Use hist() to draw one."),
        ],
        "How do I read a comma separated file into a data frame?",
    )  # fmt: skip
    assert done.metadata["grounding"] == "cited"
    assert {c["note_title"] for c in done.citations} == {"Reading data"}
    assert done.content.startswith("From your note “Reading data”: [1]")
    assert "histogram" not in done.content
    html = str(present(done).html)
    assert '<mark class="answer-quote">Use read.csv() to read a comma separated file' in html


def test_a_passage_from_another_note_is_listed_not_stitched_in(alice):
    done = ask_notes(
        alice,
        [
            ("CSV in", "Use read.csv() to read a comma separated file into a data frame."),
            ("CSV out", "Use write.csv() to write a data frame back out to a comma separated "
                        "file."),
        ],
        "How do I read a comma separated file into a data frame?",
    )  # fmt: skip
    assert len({c["note_id"] for c in done.citations}) == 1
    [further] = done.metadata["related"]
    assert further["note_title"] == "CSV out"
    assert "write.csv" not in done.content
    view = present(done)
    assert [s.label for s in view.related] == ["CSV out"]


def test_a_copy_of_a_further_passage_is_listed_once(alice):
    out = "Use write.csv() to write a data frame back out to a comma separated file."
    done = ask_notes(
        alice,
        [
            ("CSV in", "Use read.csv() to read a comma separated file into a data frame."),
            ("CSV out", out),
            ("CSV out, a copy", out),
        ],
        "How do I read a comma separated file into a data frame?",
    )
    assert [r["preview"] for r in done.metadata["related"]] == [out]


def test_weak_evidence_is_answered_once_with_the_closest_matches(alice):
    done = ask_notes(
        alice,
        [("Plots", "A histogram shows how the values of a numeric vector are spread.")],
        "Which night train to Bergen has a histogram of its delays on Sunday mornings?",
    )
    assert done.metadata["grounding"] == "abstained"
    assert done.content.count("answer") == 1
    assert done.citations == []
    assert [r["note_title"] for r in done.metadata["related"]] == ["Plots"]


def test_the_frame_and_abstention_are_written_in_the_asker_s_language(alice):
    with translation.override("de"):
        done = ask_notes(
            alice,
            [("Daten", "Use read.csv() to read a comma separated file into a data frame.")],
            "How do I read a comma separated file into a data frame?",
        )
    assert done.content.startswith("Aus deiner Notiz „Daten“")


def test_a_note_is_quoted_as_plain_text(alice):
    done = ask_notes(
        alice,
        [("Reading data", "## Reading CSV\n\nUse **`read.csv()`** to read a *comma separated* "
                          "file into a data frame, see [the manual](https://example.org).")],
        "How do I read a comma separated file into a data frame?",
    )  # fmt: skip
    assert done.metadata["grounding"] == "cited"
    [citation] = done.citations
    assert citation["kind"] == "note"
    assert "read.csv() to read a comma separated file" in citation["quote"]
    assert "**" not in done.content.split("\n\n", 1)[1].replace("**Reading CSV**", "")
    assert "`" not in citation["quote"]
    assert "](" not in done.content


def test_a_name_the_sources_never_mention_is_refused(pdf_note):
    done = answer(pdf_note, "How do I use devtools::install_github() for the heron survey?")
    assert done.metadata["grounding"] == "abstained"
    assert "devtools::install_github" in done.content


def test_names_are_code_camel_case_and_long_acronyms_not_capitalised_words():
    assert salient_terms("How does MusicXML relate to devtools::install_github()?") == [
        "MusicXML",
        "devtools::install_github",
    ]
    assert salient_terms("Wie bricht das Paket eine Zeile im Dokument um?") == []
    assert salient_terms("Can I save it as a PDF?") == []


ENGLISH = (
    "The package reads a file into a data frame. Each line of the file holds one record, and "
    "the fields of a record are separated by commas or by white space. "
) * 12
GERMAN = (
    "Das Paket liest eine Datei in eine Tabelle ein. Jede Zeile der Datei enthält einen "
    "Datensatz, und die Felder eines Datensatzes werden durch Kommas getrennt. "
) * 12


def test_a_capitalised_word_is_a_name_where_the_sources_language_capitalises_only_names():
    """Whether a language writes common words in lower case is read from the passages in it:
    English text capitalises few words inside sentences, German every noun."""
    assert salient_terms("How do I run the package inside Docker containers?", [ENGLISH]) == [
        "Docker"
    ]
    assert salient_terms("Wie lese ich eine Datei mit Semikolons als Trennzeichen ein?",
                         [GERMAN]) == []  # fmt: skip
    # Without text in the question's language there is no telling: only code and CamelCase.
    assert salient_terms("How do I run the package inside Docker containers?", [GERMAN]) == []


def test_citations_are_numbered_in_order_of_first_use_without_repeats(pdf_note):
    done = answer(pdf_note, QUESTION)
    numbers = [c["n"] for c in done.citations]
    assert numbers == list(range(1, len(numbers) + 1))
    markers = [int(n) for n in re.findall(r"\[(\d+)\]", done.content)]
    assert sorted(set(markers)) == numbers
    assert markers[0] == 1


def test_renumbering_drops_unverified_markers_and_repeats():
    text, citations = renumber(
        "A [2]. B [7][7]. C [2] D [9].",
        [{"n": 2, "quote": "a"}, {"n": 7, "quote": "b"}, {"n": 7, "quote": "c"}],
    )
    assert text == "A [1]. B [2]. C [1] D."
    assert citations == [{"n": 1, "quote": "a"}, {"n": 2, "quote": "b"}]


@pytest.mark.parametrize(
    "sentence",
    [
        r"\documentclass{article} % the class, then \begin{document}",
        "INT_MIN is the smallest int, x_1 + y_2 = z and C:\\Users\\me\\file_name.txt",
        "_lead and trail_ and __bold__ and *star* and a*b*c",
        r"a \\ b and \{ and a backslash at the end\\",
        "`code`, <b>bold</b>, a | pipe, ~~struck~~, [link](https://example.org), &amp; & co",
        "# not a heading",
        "1. not a list item",
        "= not a setext underline",
    ],
)
def test_a_quoted_sentence_reads_as_the_page_has_it(sentence):
    """A passage's text renders to exactly its text, whatever it holds."""
    escaped = escape(sentence)
    assert plain_text(escaped) == sentence
    html = render_markdown(escaped)
    assert "<em>" not in html
    assert "<a " not in html


@pytest.mark.parametrize(
    "sentence",
    [r"\documentclass{article} then \begin{document}", "INT_MIN, x_1 and file_name.txt",
     r"C:\Users\me\notes", r"\urldef{\myself}\url{myself%node@gateway.net}"],
)  # fmt: skip
def test_tex_commands_and_snake_case_need_no_escapes(sentence):
    assert escape(sentence) == sentence


def test_evaluate_answers_reads_keywords_as_the_page_shows_them():
    """The evaluation scores the answer as its reader sees it: a keyword with a backslash
    matches an answer whose Markdown escapes it."""
    from types import SimpleNamespace

    from chat.management.commands.evaluate_answers import Command

    q = SimpleNamespace(id="x", kind="how-to", file="a.pdf", pages=[1], lang="en",
                        answerable=True)  # fmt: skip
    message = SimpleNamespace(
        content=escape(r"Use \documentclass{article} first."), citations=[], retrieved=[],
        reply_to=None, status="complete", metadata={}, confidence="", timings={},
    )  # fmt: skip
    row = Command._score(q, message, [r"\documentclass"])  # type: ignore[arg-type]
    assert row["keywords"] is True
    assert row["single_passage"] is None


@pytest.mark.parametrize(
    ("heading", "real"),
    [
        ("Package Option: hyphens", True),
        ("9 Grouping, loops and conditional execution . . 43", False),
        ("Table of contents . . . . . . . . 3", False),
        ("Introduction 12", False),
        ("1. Install the package first.", False),
        ("• an item of a list", False),
        ("A whole sentence that goes on and on about what the package does in detail.", False),
    ],
)
def test_only_real_headings_become_suggestions(heading, real):
    assert real_heading(heading) is real


def test_a_sentence_is_weighed_under_its_headings(alice):
    """A sentence that does not name its subject is read under its section's heading."""
    context = AnswerRequest(user=alice, notebook=NotebookFactory.create(owner=alice))
    passage = {
        "n": 1, "kind": "document", "heading": "url.sty version 3.4",
        "text": "The package defines a form of verb command that allows linebreaks at certain "
        "characters.",
    }  # fmt: skip
    evidence = weigh("What does the url package do with lines?", [passage], context)
    assert evidence.best is not None
    assert evidence.best.coverage == pytest.approx(2 / 3)  # url (heading), package (sentence)


@pytest.mark.parametrize(("mode", "passages"), [("exploring", 8), ("research", 4), ("learning", 6)])
def test_the_mode_sets_how_many_passages_are_searched(pdf_note, mode, passages):
    done = answer(pdf_note, QUESTION, mode=mode)
    assert done.tool_calls[0]["arguments"]["limit"] == passages
    assert done.reply_to is not None
    assert done.reply_to.mode == mode
    assert done.conversation.mode == mode


def test_an_unknown_mode_is_refused_with_nothing_saved(pdf_note):
    conversation = services.conversation_create(
        owner=pdf_note.notebook.owner, notebook=pdf_note.notebook, note=pdf_note
    )
    with pytest.raises(Exception, match="Choose a mode"):
        services.message_ask(conversation=conversation, content=QUESTION, mode="party")
    assert not conversation.messages.exists()


def test_follow_up_chips_name_sections_of_further_passages_without_page_numbers(pdf_note):
    done = answer(pdf_note, QUESTION)
    for suggestion in done.follow_ups:
        assert "“" in suggestion
        assert not re.search(r"\.\s?\.|\d\s*”", suggestion)
