"""Offline answers worth reading: names the sources never mention are refused, notes are quoted
as plain text, citations run 1..n, follow-ups come from real headings, and the mode shapes the
answer."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from chat import services
from chat.agent import generate
from chat.citations import renumber
from chat.extractive import _escape, _real_heading
from chat.grounding import salient_terms, weigh
from chat.models import Message
from chat.tools import ToolContext
from notebook.markdown import plain_text, render_markdown
from notes.services import note_create
from tests.attachments.test_pipeline import ingest
from tests.conftest import upload
from tests.factories import NotebookFactory

pytestmark = pytest.mark.django_db
QUESTION = "Why does the url package refuse to break a line between two consecutive colons?"


@pytest.fixture
def url_note(alice):
    notebook = NotebookFactory.create(owner=alice, title="TeX")
    note = note_create(notebook=notebook, author=alice, title="URLs")
    attachment = ingest(upload(alice, note, "url.pdf"))
    assert attachment.status == "ready"
    return note


def answer(note, question: str, *, mode: str = "", notebook_chat: bool = False) -> Message:
    conversation = services.conversation_create(
        owner=note.notebook.owner, notebook=note.notebook, note=None if notebook_chat else note
    )
    _, pending = services.message_ask(conversation=conversation, content=question, mode=mode)
    done = generate(pending.pk, lambda event, data: None)
    assert done is not None
    return done


def test_a_name_the_sources_never_mention_is_refused(url_note):
    done = answer(url_note, "What is the capital of Peru?")
    assert done.metadata["grounding"] == "abstained"
    assert "never mention “Peru”" in done.content
    assert done.citations == []
    assert done.follow_ups == []


def test_names_are_found_case_folded_and_short_acronyms_do_not_refuse(url_note):
    assert salient_terms("Does the Url package break lines in a PDF?") == ["Url"]
    done = answer(url_note, "Does the Url package break lines at colons in a PDF?")
    assert done.metadata["grounding"] == "cited"


def test_german_nouns_are_not_names():
    assert salient_terms("Wie bricht das Paket eine Zeile im Dokument um?") == []
    assert salient_terms("What is the capital of Peru?") == ["Peru"]


def test_citations_are_numbered_in_order_of_first_use_without_repeats(url_note):
    done = answer(url_note, QUESTION)
    numbers = [c["n"] for c in done.citations]
    assert numbers == list(range(1, len(numbers) + 1))
    markers = [int(n) for n in __import__("re").findall(r"\[(\d+)\]", done.content)]
    assert sorted(set(markers)) == numbers
    assert markers[0] == 1


def test_renumbering_drops_unverified_markers_and_repeats():
    text, citations = renumber(
        "A [2]. B [7][7]. C [2] D [9].",
        [{"n": 2, "quote": "a"}, {"n": 7, "quote": "b"}, {"n": 7, "quote": "c"}],
    )
    assert text == "A [1]. B [2]. C [1] D."
    assert citations == [{"n": 1, "quote": "a"}, {"n": 2, "quote": "b"}]


def ask_a_note(user, title: str, body: str, question: str) -> Message:
    """Ask `question` in a notebook chat whose only source is a note."""
    notebook = NotebookFactory.create(owner=user, title="R")
    note_create(notebook=notebook, author=user, title=title, body=body)
    conversation = services.conversation_create(owner=user, notebook=notebook)
    _, pending = services.message_ask(conversation=conversation, content=question)
    done = generate(pending.pk, lambda event, data: None)
    assert done is not None
    return done


def test_a_note_is_quoted_as_plain_text(alice):
    done = ask_a_note(
        alice, "Reading data",
        "## Reading CSV\n\nUse **`read.csv()`** to read a *comma separated* file into a "
        "data frame, see [the manual](https://example.org).",
        "How do I read a comma separated file into a data frame?",
    )  # fmt: skip
    assert done.metadata["grounding"] == "cited"
    [citation] = done.citations
    assert citation["kind"] == "note"
    assert "read.csv() to read a comma separated file" in citation["quote"]
    assert "**" not in done.content
    assert "`" not in citation["quote"]
    assert "](" not in done.content


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
    ],
)
def test_a_quoted_sentence_reads_as_the_page_has_it(sentence):
    """An extractive answer's sentence renders to exactly its text, whatever it holds."""
    escaped = _escape(sentence)
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
    assert _escape(sentence) == sentence


def test_evaluate_answers_reads_keywords_as_the_page_shows_them():
    from chat.management.commands.evaluate_answers import Command

    q = SimpleNamespace(id="q", kind="how-to", file="url.pdf", pages=[2], lang="en",
                        answerable=True)  # fmt: skip
    for content in (r"Predefine it with \urldef{\myself} [1]", r"with \\urldef\_x [1]"):
        answer = Message(content=content, citations=[], retrieved=[], metadata={}, timings={})
        scored = Command._score(q, answer, [r"\urldef"])
        assert scored["keywords"] is True


@pytest.mark.parametrize(
    ("heading", "real"),
    [
        ("5 Defining styles", True),
        ("3 Style", True),
        ("第 3 章 文档结构", True),
        ("1 See the on-line help for autoload for the meaning of this.", False),
        ("1. Install the package first.", False),
        ("• an item of a list", False),
        ("A whole sentence that goes on and on about what the package does in detail.", False),
    ],
)
def test_only_real_headings_become_suggestions(heading, real):
    assert _real_heading(heading) is real


def test_a_sentence_is_weighed_under_its_headings(alice):
    """The first sentence of url.pdf does not name url.sty; its section's heading does, and the
    question's words found there count towards the sentence's coverage."""
    context = ToolContext(user=alice, notebook=NotebookFactory.create(owner=alice))
    passage = {
        "n": 1, "kind": "document", "heading": "url.sty version 3.4",
        "text": "The package defines a form of verb command that allows linebreaks at certain "
        "characters.",
    }  # fmt: skip
    evidence = weigh("What does the url package do with lines?", [passage], context)
    assert evidence.best is not None
    assert evidence.best.coverage == pytest.approx(2 / 3)  # url (heading), package (sentence)


def test_follow_up_suggestions_are_found_again_by_a_search(url_note):
    done = answer(url_note, QUESTION)
    assert done.follow_ups
    for suggestion in done.follow_ups:
        assert "“" in suggestion
        assert "on-line help" not in suggestion


def test_a_follow_up_suggests_only_names_the_user_asked_about(url_note):
    """A follow-up ("Will that also make them clickable in the PDF?") is searched with the
    names of the answer before it, and offered "Where do the sources mention “UrlFont”?", a
    name the user never asked about. The suggestion takes its names from the question."""
    from chat.extractive import ExtractiveAnswerer
    from chat.grounding import Candidate

    context = ToolContext(user=url_note.notebook.owner, notebook=url_note.notebook, note=url_note)
    chosen = [Candidate(1, 0, 0, "This package does not make hyper-links!")]
    completed = "Will that also make them clickable in the PDF? UrlFont url package"
    asked = "Will that also make them clickable in the PDF?"
    suggest = ExtractiveAnswerer._follow_ups
    assert suggest(completed, [], chosen, context) == ["Where do the sources mention “UrlFont”?"]
    assert suggest(completed, [], chosen, context, names_from=asked) == []


@pytest.mark.parametrize(("mode", "passages"), [("exploring", 8), ("research", 4), ("learning", 6)])
def test_the_mode_sets_how_many_passages_are_searched(url_note, mode, passages):
    done = answer(url_note, QUESTION, mode=mode)
    assert done.tool_calls[0]["arguments"]["limit"] == passages
    assert done.reply_to.mode == mode
    assert done.conversation.mode == mode


def test_learning_ends_with_a_check_question_and_research_flags_uncertainty(url_note):
    learning = answer(url_note, QUESTION, mode="learning")
    assert "Check yourself:" in learning.content
    assert learning.content.rstrip().endswith("?")
    research = answer(url_note, "Which characters can break a line inside a url?", mode="research")
    if research.confidence != "high":
        assert "support this only in part" in research.content


def test_an_unknown_mode_is_refused_with_nothing_saved(url_note):
    conversation = services.conversation_create(
        owner=url_note.notebook.owner, notebook=url_note.notebook, note=url_note
    )
    with pytest.raises(Exception, match="Choose a mode"):
        services.message_ask(conversation=conversation, content=QUESTION, mode="party")
    assert not conversation.messages.exists()


def test_a_sentence_leaning_on_the_one_before_brings_it_along(alice):
    done = ask_a_note(
        alice, "Loops",
        "Loops in R are written with for, while and repeat. The break statement ends any "
        "loop early, possibly abnormally. This is the only way to terminate repeat loops.",
        "What is the only way to terminate repeat loops?",
    )  # fmt: skip
    assert "This is the only way to terminate repeat loops." in done.content
    assert "The break statement ends any loop early" in done.content
    assert done.content.index("The break statement") < done.content.index("This is the only")


def test_the_best_sentence_brings_the_one_after_it_that_answers(alice):
    """The sentence most like the question often only sets it up (what the reference list
    looks like); the source answers in the next one (how far it is indented)."""
    notebook = NotebookFactory.create(owner=alice, title="TeX")
    note = note_create(notebook=notebook, author=alice, title="Citations")
    assert ingest(upload(alice, note, "natbib.pdf")).status == "ready"
    done = answer(note, "In a natbib author-year bibliography, by how much are the continuation "
                        "lines of a reference indented by default?")  # fmt: skip
    assert done.metadata["grounding"] == "cited"
    assert "1 em" in done.content


def test_a_best_sentence_that_restates_the_question_brings_the_next_one():
    """R-admin's "Various environment variables can be set to determine where R creates its
    per-session temporary directory." is the question said back (similarity 0.94); the next
    sentence names TMPDIR but scores under half of it. A restatement brings the sentence
    after it whenever that one is about the question at all; an ordinary best does not."""
    from chat.extractive import ExtractiveAnswerer
    from chat.grounding import Candidate, Evidence
    from chat.modes import spec

    def answer_to(similarity):
        best = Candidate(1, 0, 0, "Variables decide where R puts its temporary directory.",
                         similarity=similarity, coverage=0.67)  # fmt: skip
        after = Candidate(1, 0, 1, "TMPDIR, TMP and TEMP are searched in turn.",
                          similarity=0.49, coverage=0.1)  # fmt: skip
        assert after.score < best.score * 0.5
        chosen = ExtractiveAnswerer._choose(Evidence(ranked=[best, after]), spec("exploring"))
        return [c.text for c in chosen]

    assert len(answer_to(0.94)) == 2
    assert len(answer_to(0.75)) == 1


def test_a_follow_up_prefers_what_the_previous_answer_did_not_quote():
    """Exploring quotes three sentences: of two that score about the same for the last place,
    the one the previous answer already quoted gives way (SAID_PENALTY); with nothing said
    before, the scores decide."""
    from chat.extractive import SAID_PENALTY, ExtractiveAnswerer
    from chat.grounding import Candidate, Evidence
    from chat.modes import spec

    top = [Candidate(n, n, 0, f"Sentence {n} answers it.", similarity=0.9, coverage=0.5)
           for n in (1, 2)]  # fmt: skip
    old = Candidate(3, 3, 0, "The sentence the last answer quoted.", similarity=0.8, coverage=0.5)
    new = Candidate(4, 4, 0, "A sentence about something else.", similarity=0.78, coverage=0.5)
    assert 0 < old.score - new.score < SAID_PENALTY
    evidence = Evidence(ranked=[*top, old, new])
    choose = ExtractiveAnswerer._choose
    assert choose(evidence, spec("exploring")) == [*top, old]
    assert choose(evidence, spec("exploring"), said={old.text}) == [*top, new]


def test_one_strong_passage_fills_the_answer_when_no_other_comes_close():
    """At most two sentences of one passage while others score above the floor; when none
    does, the third comes from the same passage rather than leaving the answer short (the
    sentence naming the newer package followed the two about older versions)."""
    from chat.extractive import ExtractiveAnswerer
    from chat.grounding import Candidate, Evidence
    from chat.modes import spec

    same = [Candidate(1, 0, i, f"Sentence {i} of the passage.", similarity=0.8, coverage=0.5)
            for i in range(3)]  # fmt: skip
    weak = Candidate(2, 1, 0, "A sentence of another passage.", similarity=0.3, coverage=0.1)
    chosen = ExtractiveAnswerer._choose(Evidence(ranked=[*same, weak]), spec("exploring"))
    assert chosen == same
    other = Candidate(3, 2, 0, "A strong sentence elsewhere.", similarity=0.75, coverage=0.5)
    ranked = sorted([*same, weak, other], key=lambda c: -c.score)
    chosen = ExtractiveAnswerer._choose(Evidence(ranked=ranked), spec("exploring"))
    assert chosen == [same[0], same[1], other]


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("How often does a random 2x2 digit matrix end up singular?", "number"),
        ("Up to which Stata version can read.dta read files?", "number"),
        ("Wie viele Pakete werden mit R geliefert?", "number"),
        ("Hvor mange pakker følger med R?", "number"),
        ("TeX 的版本号是多少？", "number"),
        ("How do I read a fixed-width file?", "code"),
        ("Wie kann ich die Schrift ändern?", "code"),
        ("我怎样才能让编译快一些？", "code"),
        ("Who originally developed LaTeX?", "name"),
        ("Wie heißen die Module?", "name"),
        ("Why does the url package refuse to break between colons?", ""),
    ],
)
def test_the_kind_of_answer_a_question_asks_for(question, kind):
    from chat.answer_types import expected

    assert expected(question) == kind


def test_a_sentence_holds_an_answer_the_question_does_not_already_give():
    from chat.answer_types import CODE, NAME, NUMBER, holds

    asked = "If you fill a 2x2 matrix with random digits, how often is it singular?"
    assert holds("About 1 in 20 such matrices is singular.", NUMBER, asked)
    assert not holds("This amounts to finding the distribution of the determinant.", NUMBER,
                     asked)  # fmt: skip
    assert not holds("Version 2 of it, see page 12, is singular.", NUMBER, "Is 2 or 12 right?")
    how = "How can I import data where every value sits at a fixed position?"
    assert holds("Function read.fwf provides a simple way to read such files.", CODE, how)
    assert holds("加载这个宏包后，使用 \\syntaxonly 命令。", CODE, "怎样才能让编译快一些？")
    assert not holds("Sometimes data files have fields in pre-specified columns.", CODE, how)
    assert not holds("Use read.fwf for that.", CODE, "How do I use read.fwf?")
    assert holds("LaTeX was first developed by Leslie Lamport in 1984.", NAME,
                 "Who developed LaTeX?")  # fmt: skip
    assert not holds("Jede Art von Symbol wird durch ein eigenes Modul verarbeitet.", NAME,
                     "Wie heißen die Module?")  # fmt: skip


def test_the_answer_type_bonus_breaks_a_tie():
    from chat.grounding import ANSWER_TYPE_BONUS, Candidate

    plain = Candidate(1, 0, 0, "This amounts to finding the distribution.", 0.5, 0.3)
    answering = Candidate(1, 0, 1, "About 1 in 20 such matrices is singular.", 0.47, 0.25,
                          answers=True)  # fmt: skip
    assert plain.score - ANSWER_TYPE_BONUS < answering.score < plain.score + ANSWER_TYPE_BONUS
    assert answering.score > plain.score


def test_a_follow_up_weighs_what_the_user_asked_now(url_note, monkeypatch):
    """A follow-up is weighed against the question completed from the thread; half of a
    sentence's coverage is the user's own words, so the sentence that only restates the
    thread ranks below the one about what was asked now."""
    from chat import grounding

    context = ToolContext(user=url_note.notebook.owner, notebook=url_note.notebook, note=url_note)
    question = "Will that also make them clickable in the PDF?"
    focus = f"{question} url package print web addresses same font surrounding text"
    passages = [
        {"n": 1, "kind": "document", "heading": "",
         "text": "This package does not make clickable links in a PDF: see hyperref."},
        {"n": 2, "kind": "document", "heading": "",
         "text": "The url package prints web addresses in the same font as the surrounding "
                 "text."},
    ]  # fmt: skip
    assert grounding.weigh(focus, passages, context, names_from=question).best.n == 1
    monkeypatch.setattr(grounding, "OWN_WORDS_SHARE", 0.0)
    assert grounding.weigh(focus, passages, context, names_from=question).best.n == 2


@pytest.mark.parametrize(
    ("sentence", "signpost"),
    [
        ("In Section 1.2 [Export to text files], page 4, we saw a number of variations.", True),
        ("As pointed out in Section 2.7, the KEY field is treated differently.", True),
        ("Before describing how to customize the printing style, it is best to mention.", True),
        ("See also the chapter on graphics for more examples of this.", True),
        ("Siehe Abschnitt 3 für die Einzelheiten der Notensetzung.", True),
        ("Se avsnitt 4 for detaljer om dette.", True),
        ("参见第3章的相关内容。", True),
        ("In this case the file may omit the row label column.", False),
        ("In R, the function write.table writes a data frame to a file.", False),
        ("The section sign is typed with \\S in LaTeX.", False),
        ("In the table below, the second column gives the default value.", False),
        ("In part, this is because the file is read twice.", False),
        ("In the previous chapter we read data from files.", True),
    ],
)
def test_a_sentence_pointing_elsewhere_is_a_signpost(sentence, signpost):
    from chat.grounding import _SIGNPOST

    assert bool(_SIGNPOST.match(sentence)) is signpost


def test_a_signpost_gives_way_to_a_sentence_that_says_something(alice):
    """A sentence like "As pointed out in Section 2.7, the KEY field is treated differently"
    names the question's words but not the answer; a sentence that scores a little lower and
    says how comes first (SIGNPOST_PENALTY)."""
    from chat.extractive import ExtractiveAnswerer
    from chat.grounding import SIGNPOST_PENALTY, Candidate, Evidence
    from chat.modes import spec

    context = ToolContext(user=alice, notebook=NotebookFactory.create(owner=alice))
    pointer = "As pointed out in Section 2.7, the KEY field is treated differently by plainnat."
    passage = {"n": 1, "kind": "note", "text": pointer}
    assert weigh("How does plainnat treat the KEY field?", [passage], context).best.signpost
    top = Candidate(1, 0, 0, "The KEY field orders the list.", similarity=0.7, coverage=0.5)
    says = Candidate(2, 1, 0, "It is used in place of the author.", similarity=0.6, coverage=0.4)
    points = Candidate(3, 2, 0, pointer, similarity=0.65, coverage=0.45, signpost=True)
    assert 0 < points.score + SIGNPOST_PENALTY - says.score < SIGNPOST_PENALTY
    ranked = sorted([top, says, points], key=lambda c: -c.score)
    two = replace(spec("exploring"), max_sentences=2)
    assert ExtractiveAnswerer._choose(Evidence(ranked=ranked), two) == [top, says]


def test_a_sentence_is_quoted_once_though_two_passages_hold_it():
    """Passages overlap: the sentence after the best one, brought along, is already inside a
    longer sentence another passage gave; it is not quoted a second time."""
    from chat.extractive import ExtractiveAnswerer
    from chat.grounding import Candidate, Evidence
    from chat.modes import spec

    short = "If presented with a file that has a header field for the row labels, read it in"
    best = Candidate(1, 0, 9, "We recommend that you give the header.", similarity=0.9,
                     coverage=0.6)  # fmt: skip
    longer = Candidate(2, 1, 1, short + " by read.table(header = TRUE).", similarity=0.85,
                       coverage=0.6)  # fmt: skip
    after = Candidate(1, 0, 10, short, similarity=0.8, coverage=0.5)
    chosen = ExtractiveAnswerer._choose(Evidence(ranked=[best, longer, after]), spec("exploring"))
    assert chosen == [best, longer]


def test_an_it_that_stands_for_nothing_does_not_bring_the_sentence_before():
    """An opening like "It is quite common for a file…" leans on nothing; "It ends" does."""
    from chat.extractive import ExtractiveAnswerer
    from chat.grounding import Candidate, Evidence
    from chat.modes import spec

    def choose(text: str) -> list[Candidate]:
        before = Candidate(1, 0, 0, "In numeric columns, NaN and Inf are accepted.", 0.2, 0.1)
        it = Candidate(1, 0, 1, text, similarity=0.9, coverage=0.6)
        return ExtractiveAnswerer._choose(Evidence(ranked=[it, before]), spec("research"))

    common = "It is quite common for a spreadsheet file to omit trailing empty fields."
    assert [c.text for c in choose(common)] == [common]
    assert len(choose("It ends the loop at once, whatever the condition says.")) == 2
