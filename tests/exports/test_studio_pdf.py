"""Studio outputs as PDF (exports.pdf): purpose-built outputs of each kind are rendered and the
PDF read back with pdfminer.six: its text, and which font drew which character where."""

from __future__ import annotations

import importlib.util
import io
from datetime import UTC, datetime
from typing import Any

import pytest
from django.http import Http404
from pdfminer.high_level import extract_pages, extract_text
from pdfminer.layout import LTChar, LTTextContainer, LTTextLine

from exports import pdf
from exports.bundles import studio_pdf_export
from exports.pdf import studio_pdf
from notes.services import notebook_create
from studio.models import StudioOutput

pytestmark = pytest.mark.django_db

GERMAN = "Die Königin legt im Frühjahr täglich bis zu zweitausend Eier."
CHINESE = "蜜蜂在冬天聚集成团，靠振动肌肉取暖。"


def _doc(n, *, file="bees.pdf", page=3, quote=GERMAN):
    return {"n": n, "kind": "document", "attachment_id": 1, "file": file, "page": page,
            "chunk_id": 1, "quote": quote}  # fmt: skip


@pytest.fixture
def book(alice):
    return notebook_create(owner=alice, title="Bienenkunde")


@pytest.fixture
def make(alice, book):
    def make(kind, sections, citations=(), **fields):
        fields = {"title": f"A {kind}", "generator": "offline", **fields}
        return StudioOutput.objects.create(
            notebook=book, created_by=alice, kind=kind, status=StudioOutput.Status.READY,
            ready_at=datetime(2026, 3, 14, 9, 30, tzinfo=UTC),
            content={"sections": sections, "citations": list(citations)}, **fields,
        )  # fmt: skip

    return make


def _read(data: bytes) -> str:
    """The PDF's text with whitespace collapsed (lines wrap where the page ends) and without
    the page numbers in the footers."""
    assert data.startswith(b"%PDF-")
    lines = extract_text(io.BytesIO(data)).splitlines()
    return " ".join(" ".join(line for line in lines if not line.strip().isdigit()).split())


def _lines(data: bytes) -> list[LTTextLine]:
    return [line for page in extract_pages(io.BytesIO(data)) for box in page
            if isinstance(box, LTTextContainer) for line in box
            if isinstance(line, LTTextLine)]  # fmt: skip


def _line(data: bytes, text: str) -> LTTextLine:
    found = [line for line in _lines(data) if line.get_text().strip() == text]
    assert found, f"no line {text!r} in {[line.get_text() for line in _lines(data)]}"
    return found[0]


def _fonts(line: LTTextLine) -> dict[str, str]:
    """Each character of a line and the font that drew it (the last one seen)."""
    return {c.get_text(): c.fontname for c in line if isinstance(c, LTChar)}


def test_briefing_has_title_byline_headings_quotes_and_sources(make):
    output = make(
        "briefing",
        [{"heading": "Zusammenfassung", "items": [{"text": f"{GERMAN} [1]"},
                                                  {"text": f"{CHINESE} [2]"}]},
         {"heading": "Key topics", "items": [{"text": "Winterruhe", "cited": False}]}],
        [_doc(1), _doc(2, file="蜂.pdf", page=12, quote=CHINESE)],
        title="Bienen im Jahreslauf",
    )  # fmt: skip
    text = _read(studio_pdf(output))
    assert text.startswith("Bienen im Jahreslauf Briefing · Bienenkunde · made by alice · ")
    assert "Quoted from the sources" in text
    assert "Zusammenfassung" in text
    assert "Key topics • Winterruhe" in text
    assert f"{GERMAN} [1]" in text
    assert f"{CHINESE} [2]" in text
    assert f"Sources [1] bees.pdf, page 3: “{GERMAN}” [2] 蜂.pdf, page 12: “{CHINESE}”" in text


def test_chinese_is_drawn_with_a_cjk_font_and_latin_with_the_body_font(make):
    output = make("briefing", [{"heading": "摘要", "items": [{"text": f"{CHINESE} [1]"}]}],
                  [_doc(1, quote=CHINESE)])  # fmt: skip
    data = studio_pdf(output)
    fonts = _fonts(_line(data, f"{CHINESE} [1]"))
    assert "Kurinto" in fonts["蜜"], fonts  # fpdf2's fallback font: not a blank glyph
    assert "SourceSans" in fonts["["], fonts


def test_latin_only_output_embeds_no_cjk_font(make):
    output = make("briefing", [{"heading": "Summary", "items": [{"text": f"{GERMAN} [1]"}]}],
                  [_doc(1)])  # fmt: skip
    data = studio_pdf(output)
    assert b"Kurinto" not in data  # the fallback is read and embedded only when needed
    assert "Königin" in _read(data)


def test_chat_model_and_its_name_in_the_byline(make):
    output = make("briefing", [{"heading": "S", "items": [{"text": "Eins [1]"}]}], [_doc(1)],
                  generator="llm", model="tiny-model-7b")  # fmt: skip
    assert "Chat model (tiny-model-7b)" in _read(studio_pdf(output))


def test_faq_markdown_answer_is_read_not_printed_as_markup(make):
    answer = (
        "Bees **cluster** in winter [1].\n\n- first point\n- second point\n\n"
        "```python\ndef warm(hive):\n    return hive.heat\n```\n\nThen <b>literal</b> tags."
    )
    output = make(
        "faq",
        [{"heading": "Questions and answers",
          "items": [{"question": "How do bees survive winter?", "text": answer,
                     "markdown": True}]}],
        [_doc(1)],
    )  # fmt: skip
    data = studio_pdf(output)
    text = _read(data)
    assert "How do bees survive winter? Bees cluster in winter [1]." in text
    assert "**" not in text
    assert "```" not in text
    assert "• first point • second point" in text
    assert "Then <b>literal</b> tags." in text  # raw HTML in Markdown stays text
    code = _line(data, "def warm(hive):")
    assert set(_fonts(code).values()) == {next(iter(_fonts(code).values()))}
    assert "SourceCodePro" in _fonts(code)["d"]
    assert "return hive.heat" in text
    assert "Bold" in _fonts(_line(data, "Bees cluster in winter [1]."))["c"]
    assert "Bold" not in _fonts(_line(data, "Bees cluster in winter [1]."))["B"]


def test_timeline_dates_as_precise_as_the_text(make):
    output = make(
        "timeline",
        [{"heading": "Timeline", "items": [
            {"date": "1852-01-01", "precision": "year", "text": "The first hive was built. [1]"},
            {"date": "1921-03-03", "precision": "day", "text": "The club was founded. [2]"}]}],
        [_doc(1, page=1, quote="The first hive was built."),
         _doc(2, page=2, quote="The club was founded.")],
    )  # fmt: skip
    text = _read(studio_pdf(output))
    assert "1852: The first hive was built. [1] March 3, 1921: The club was founded. [2]" in text


def test_mind_map_is_an_indented_outline(make):
    root = {"text": "", "label": "Bees", "cited": False, "children": [
        {"text": "Winter [1]", "label": "Winter", "children": [
            {"text": "Cluster [2]", "label": "Cluster", "children": []}]},
        {"text": "History [3]", "label": "History", "children": []}]}  # fmt: skip
    citations = [_doc(1, quote="Winter"), _doc(2, quote="Cluster"), _doc(3, quote="History")]
    data = studio_pdf(make("mind_map", [{"heading": "Map", "items": [root]}], citations))
    text = _read(data)
    assert "Bees – Winter [1] – Cluster [2] – History [3]" in text
    x = {label: _line(data, label).x0 for label in
         ("Bees", "– Winter [1]", "– Cluster [2]", "– History [3]")}  # fmt: skip
    assert x["Bees"] < x["– Winter [1]"] == x["– History [3]"] < x["– Cluster [2]"]


def test_flashcards_front_over_back(make):
    output = make(
        "flashcards",
        [{"heading": "Flashcards",
          "items": [{"front": "Drohne", "back": "Die männliche Biene. [1]"}]}],
        [_doc(1, quote="Die männliche Biene.")],
    )  # fmt: skip
    data = studio_pdf(output)
    assert "Flashcards Drohne Die männliche Biene. [1]" in _read(data)
    assert "Bold" in _fonts(_line(data, "Drohne"))["D"]


def test_quiz_marks_the_answer(make):
    output = make(
        "quiz",
        [{"heading": "Quiz", "items": [
            {"question": "The _____ lays the eggs.", "options": ["drone", "queen", "worker"],
             "answer": 1, "text": "The queen lays the eggs. [1]"}]}],
        [_doc(1, quote="The queen lays the eggs.")],
    )  # fmt: skip
    data = studio_pdf(output)
    text = _read(data)
    assert "1. The _____ lays the eggs. ☐ A. drone ☑ B. queen ☐ C. worker" in text
    assert "The queen lays the eggs. [1]" in text
    assert "Bold" in _fonts(_line(data, "☑ B. queen"))["q"]
    assert "Bold" not in _fonts(_line(data, "☐ A. drone"))["d"]


def test_study_guide_terms_and_note_citations(make):
    output = make(
        "study_guide",
        [{"heading": "Key concepts", "items": [{"term": "Propolis", "text": "Bee glue. [1]"}]}],
        [{"n": 1, "kind": "note", "note_id": 4, "note_title": "Meine Notizen",
          "quote": "Bee glue."}],
    )  # fmt: skip
    text = _read(studio_pdf(output))
    assert "Propolis: Bee glue. [1]" in text
    assert "[1] Meine Notizen: “Bee glue.”" in text


def test_hostile_text_prints_literally(make):
    hostile = '<script>alert("x")</script> **bold** {nb} <a href="javascript:alert(1)">'
    output = make(
        "faq",
        [{"heading": "<h1>Heading</h1>", "items": [
            {"question": f"Q {hostile}", "text": f"A quote {hostile} [1]"}]}],
        [_doc(1, file="<img src=x onerror=alert(1)>.pdf", quote=f"A quote {hostile}")],
        title=f"Title {hostile}",
    )  # fmt: skip
    data = studio_pdf(output)
    text = _read(data)
    assert text.startswith(f"Title {hostile} FAQ")
    assert "<h1>Heading</h1>" in text
    assert f"Q {hostile} A quote {hostile} [1]" in text
    assert f"[1] <img src=x onerror=alert(1)>.pdf, page 3: “A quote {hostile}”" in text
    assert b"/JavaScript" not in data
    assert b"/URI" not in data


def test_long_words_and_long_quotes_wrap(make):
    word = "Donaudampfschifffahrtsgesellschaft" * 40
    url = "https://example.org/" + "a/" * 300
    quote = ("Bienen " * 1500)[:10_000]
    output = make(
        "briefing",
        [{"heading": "Long", "items": [{"text": f"{word} [1]"}, {"text": f"{url} [2]"},
                                       {"text": f"{quote} [3]"}]}],
        [_doc(1, quote=word), _doc(2, quote=url), _doc(3, quote=quote)],
    )  # fmt: skip
    data = studio_pdf(output)
    squeezed = "".join(_read(data).split())
    assert word + "[1]" in squeezed
    assert url + "[2]" in squeezed
    assert "".join(quote.split()) + "[3]" in squeezed
    assert max(line.x1 for line in _lines(data)) < 595 - 18 * 72 / 25.4 + 1  # A4, right margin


@pytest.mark.parametrize(
    "content",
    [
        {},
        [],
        "sections",
        {"sections": "x", "citations": "y"},
        {"sections": [None, 3, {"items": None}, {"heading": None, "items": [None, 1, "x"]}]},
        {"sections": [{"heading": 5, "items": [{"question": 1, "options": "abc", "answer": "0"},
                                                {"date": "not a date", "text": ["x"]},
                                                {"text": {"a": 1}, "markdown": True},
                                                {"term": True, "cited": False}]}]},
        {"sections": [], "citations": [{"n": "x"}, {"n": 1, "page": "abc", "file": None},
                                        {"n": 2, "kind": "note"}, None]},
        {"sections": [{"heading": "Ctl\x00\x1b[31m\u202e", "items": [
            {"text": "\x07bell\ud800 tab\there 🐝 שלום [1]", "markdown": True}]}]},
    ],
)  # fmt: skip
def test_odd_content_still_makes_a_pdf(make, content):
    output = make("quiz", [])
    output.content = content  # not saved: PostgreSQL refuses \x00 and lone surrogates
    text = _read(studio_pdf(output))
    assert text.startswith("A quiz Quiz · Bienenkunde")


def test_deep_mind_map_makes_a_pdf(make):
    root: dict[str, Any] = {"text": "level 0", "children": []}
    node = root
    for depth in range(1, 3000):
        child = {"text": f"level {depth}", "children": []}
        node["children"].append(child)
        node = child
    output = make("mind_map", [])
    output.content = {"sections": [{"heading": "Deep", "items": [root]}]}  # too deep to save
    text = _read(studio_pdf(output))
    assert "– level 2999" in text


def test_without_the_font_package_core_fonts_replace_what_latin1_lacks(make, monkeypatch):
    monkeypatch.setattr(pdf, "faces", lambda: None)
    output = make("briefing", [{"heading": "Summary", "items": [
        {"text": f"{GERMAN} [1]"}, {"text": f"{CHINESE} [2]"}]}],
        [_doc(1), _doc(2, quote=CHINESE)], title="Über Bienen")  # fmt: skip
    text = _read(studio_pdf(output))
    assert text.startswith("Über Bienen Briefing · Bienenkunde")
    assert f"{GERMAN} [1]" in text
    assert "?" * len(CHINESE) + " [2]" in text


def test_pdf_export_is_scoped_to_who_may_see_the_notebook(make, alice, bob):
    output = make("briefing", [{"heading": "S", "items": [{"text": f"{GERMAN} [1]"}]}],
                  [_doc(1)], title="Bienen/Wespen")  # fmt: skip
    found = studio_pdf_export(user=alice, output_id=output.pk)
    assert found is not None
    filename, data = found
    assert filename.endswith(".pdf")
    assert "/" not in filename
    assert GERMAN in _read(data)
    with pytest.raises(Http404):
        studio_pdf_export(user=bob, output_id=output.pk)
    StudioOutput.objects.filter(pk=output.pk).update(status=StudioOutput.Status.PROCESSING)
    assert studio_pdf_export(user=alice, output_id=output.pk) is None


def test_control_characters_are_dropped(make):
    output = make("briefing", [])
    output.content = {"sections": [{"heading": "Alarm\x07\x1b[31m\u202eend", "items": [
        {"text": "nul\x00byte and \ud800lone [1]"}]}], "citations": [_doc(1)]}  # fmt: skip
    text = _read(studio_pdf(output))
    assert "Alarm[31mend nulbyte and lone [1]" in text


def test_without_the_font_package_the_system_dejavu_draws_latin(make, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    found = pdf.faces.__wrapped__()
    if not pdf._DEJAVU.is_dir():
        assert found is None
        return
    assert found is not None
    assert found.regular.name == "DejaVuSans.ttf"
    assert not found.fallback
    monkeypatch.setattr(pdf, "faces", lambda: found)
    output = make("briefing", [{"heading": "Summary", "items": [
        {"text": f"{GERMAN} [1]"}, {"text": f"{CHINESE} [2]"}]}],
        [_doc(1), _doc(2, quote=CHINESE)])  # fmt: skip
    data = studio_pdf(output)
    assert f"{GERMAN} [1]" in _read(data)
    assert "DejaVuSans" in _fonts(_line(data, f"{GERMAN} [1]"))["ö"]


def _audio(make, model=""):
    lines = [
        {"speaker": 0, "text": "An overview of bees.", "cited": False, "start": 0.0, "end": 2.1},
        {"speaker": 1, "text": f"{GERMAN} [1]", "start": 2.5, "end": 65.0},
    ]
    return make("audio", [{"heading": "Transcript", "items": lines}], [_doc(1)], model=model)


def test_an_audio_transcript_says_who_speaks_and_when(make):
    from exports.markdown import studio_markdown

    offline = _audio(make)
    text = _read(studio_pdf(offline))
    assert "[0:00] Host: An overview of bees." in text
    assert f"[0:02] Reader: {GERMAN} [1]" in text
    said = studio_markdown(offline)
    assert "**[0:00] Host:** An overview of bees." in said
    assert f"**[0:02] Reader:** {GERMAN} [^1]" in said
    talked = studio_markdown(_audio(make, model="fake-model"))
    assert "**[0:02] Host B:**" in talked


def test_a_chat_models_checked_sentence_is_not_shown_as_a_quote(make):
    from exports.markdown import studio_markdown

    output = make(
        "briefing",
        [{"heading": "Summary", "items": [{"text": "Queens lay up to 2000 eggs a day [1]",
                                           "written": True},
                                          {"text": f"{GERMAN} [1]"}]}],
        [_doc(1)], generator="llm", model="fake-model",
    )  # fmt: skip
    said = studio_markdown(output)
    assert "\nQueens lay up to 2000 eggs a day [^1]" in said
    assert f"> {GERMAN} [^2]" in said
