"""A Studio output as an A4 PDF, made with fpdf2 and laid out as studio_markdown lays it out.

The title; one small grey line naming the kind, the notebook, who made it, when, and whether
it was quoted from the sources or written by a chat model (which); then each section's heading
and its items by kind: quotes indented in grey, a question in bold over its answer, "term:
definition", "date: event", a quiz's options lettered with the answer ticked, flashcards
front over back, the mind map as an indented outline. The [n] markers stay in the text, and
"Sources" at the end lists each one: `[n] file, page N: “quote”` (a note's title for a note).

Every string is drawn as plain text (`multi_cell`, `write`), never through fpdf2's
`write_html` or its Markdown: a title or a quote holding `<script>` or `**` prints as typed.
An answer the chat wrote in Markdown is parsed by markdown-it (raw HTML stays text) and drawn
from its tokens: paragraphs, lists as bullets, headings and strong text in bold, code in a
monospace font. Control characters are dropped and long unbroken words wrap by character.

Fonts, all TrueType from the weblate-fonts wheel (OFL), so a fresh clone has them: Source Sans 3
(Latin, Greek, Cyrillic) and Source Code Pro for code; for what those lack, fpdf2's fallback
fonts Kurinto Sans SC (Chinese, simplified and traditional), Kurinto Sans (kana and most other
scripts) and Kurinto Sans KR (Hangul), each read only when the text needs it (megabytes
each: a Latin export takes a tenth of a second, one with Chinese half a second). Without the
wheel: DejaVu Sans from the system if there (no CJK), else the PDF core fonts with "?" for
what Latin-1 lacks. A character no font has prints blank; it never fails an export."""

from __future__ import annotations

import importlib.util
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from django.utils import formats, timezone
from django.utils.translation import gettext as _
from fontTools.ttLib import TTFont  # type: ignore[import-untyped]
from fpdf import FPDF
from fpdf.enums import XPos, YPos
from markdown_it import MarkdownIt
from markdown_it.token import Token

from chat.rendering import page_label
from studio.models import StudioOutput
from studio.rendering import clock, date_label, speaker_label

# fontTools logs each table it subsets at INFO: a dozen lines for every export.
logging.getLogger("fontTools.subset").setLevel(logging.WARNING)
_DEJAVU = Path("/usr/share/fonts/truetype/dejavu")
# C0/C1 controls (tab and newline aside), lone surrogates, bidi overrides: nothing to draw.
_UNDRAWABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069]")
SIZE = 10.5  # body text, pt
LINE = 5.2  # mm
INDENT = 6.0  # mm a quote, an answer or an outline level is indented
MAX_INDENT = 60.0  # deeper levels stay there: the text keeps two thirds of the page
GREY = (95, 95, 95)
Run = tuple[str, str]  # (text, style): "" regular, "B" bold, "M" monospace


@dataclass(frozen=True)
class Faces:
    regular: Path
    bold: Path
    mono: Path
    fallback: tuple[Path, ...] = ()


@cache
def faces() -> Faces | None:
    """The TrueType fonts to use (None: the PDF core fonts, Latin-1 only)."""
    candidates = []
    spec = importlib.util.find_spec("weblate_fonts")
    if spec is not None and spec.origin:
        root = Path(spec.origin).parent / "static" / "weblate_fonts"
        kurinto = root / "kurinto" / "ttf"
        sans = root / "source-sans" / "ttf"
        candidates.append(
            Faces(sans / "SourceSans3-Regular.ttf", sans / "SourceSans3-Bold.ttf",
                  root / "source-code" / "ttf" / "SourceCodePro-Regular.ttf",
                  (kurinto / "KurintoSansSC-Rg.ttf", kurinto / "KurintoSans-Rg.ttf",
                   kurinto / "KurintoSansKR-Rg.ttf"))
        )  # fmt: skip
    candidates.append(
        Faces(_DEJAVU / "DejaVuSans.ttf", _DEJAVU / "DejaVuSans-Bold.ttf",
              _DEJAVU / "DejaVuSansMono.ttf")
    )  # fmt: skip
    for found in candidates:
        if all(p.is_file() for p in (found.regular, found.bold, found.mono)):
            return Faces(found.regular, found.bold, found.mono,
                         tuple(p for p in found.fallback if p.is_file()))  # fmt: skip
    return None


@cache
def _covers(path: Path) -> frozenset[int]:
    """The code points a font has glyphs for."""
    with TTFont(path, lazy=True) as font:
        return frozenset(font.getBestCmap())


def _text(value: Any) -> str:
    """A JSON value as text to draw: strings and numbers as they are, anything else empty."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return ""
    return _UNDRAWABLE.sub("", str(value)).replace("\t", "    ")


def _one_line(value: Any) -> str:
    return " ".join(_text(value).split())


class _Document(FPDF):
    def __init__(self, fonts: Faces | None) -> None:
        super().__init__(format="A4")
        self.alias_nb_pages("")  # else a "{nb}" in a title would print the page count
        self.set_margins(18, 18, 18)
        self.set_auto_page_break(True, margin=18)
        self.faces = fonts
        self.families = {"": ("helvetica", ""), "B": ("helvetica", "B"), "M": ("courier", "")}
        self.covered: set[int] = set()  # what the fonts added so far can draw
        self.fallbacks: list[Path] = []  # added, in the order fpdf2 tries them
        if fonts is not None:
            for family, style, path in (("body", "", fonts.regular), ("body", "B", fonts.bold),
                                        ("mono", "", fonts.mono)):  # fmt: skip
                self.add_font(family, style, path)
            self.covered = set(_covers(fonts.regular) & _covers(fonts.bold) & _covers(fonts.mono))
            self.families = {"": ("body", ""), "B": ("body", "B"), "M": ("mono", "")}
        self.style("")

    def style(self, style: str, size: float = SIZE) -> None:
        family, font_style = self.families[style]
        self.set_font(family, font_style, size)

    def clean(self, text: str) -> str:
        """Text as the fonts can draw it: a fallback font is added (megabytes to read and
        subset) the first time the text needs what it has."""
        if self.faces is None:
            return text.encode("latin-1", "replace").decode("latin-1")
        lacking = {ord(c) for c in text} - self.covered
        if lacking:
            for path in self.faces.fallback:
                if path not in self.fallbacks and lacking & _covers(path) - self.covered:
                    self.add_font(f"fallback{len(self.fallbacks)}", "", path)
                    self.fallbacks.append(path)
                    self.covered |= _covers(path)
            self.set_fallback_fonts([f"fallback{i}" for i in range(len(self.fallbacks))],
                                    exact_match=False)  # fmt: skip
            self.covered |= lacking  # what no font has prints blank: no need to look again
        return text

    def footer(self) -> None:
        self.set_y(-12)
        self.style("", 8)
        self.set_text_color(*GREY)
        self.cell(0, 4, str(self.page_no()), align="C")

    @contextmanager
    def indented(self, mm: float) -> Iterator[None]:
        margin = self.l_margin
        self.set_left_margin(margin + min(mm, MAX_INDENT))
        self.set_x(self.l_margin)
        try:
            yield
        finally:
            self.set_left_margin(margin)
            self.set_x(margin)

    def heading(self, text: str, size: float) -> None:
        if self.will_page_break(3 * LINE + size / 2):  # not alone at the foot of a page
            self.add_page()
        self.ln(size / 4)
        self.style("B", size)
        self.set_text_color(0, 0, 0)
        self.multi_cell(0, size * 0.45, self.clean(text), align="L",
                        new_x=XPos.LMARGIN, new_y=YPos.NEXT)  # fmt: skip
        self.ln(1.5)

    def runs(self, runs: list[Run], *, indent: float = 0, grey: bool = False) -> None:
        """One paragraph of runs of text, each in its style, wrapped within the margins."""
        runs = [(text, style) for text, style in runs if text]
        if not runs:
            return
        with self.indented(indent):
            self.set_text_color(*(GREY if grey else (0, 0, 0)))
            for text, style in runs:
                self.style(style, SIZE - 1 if style == "M" else SIZE)
                self.write(LINE, self.clean(text))
            self.ln(LINE)
        self.style("")
        self.ln(1)

    def code(self, text: str, *, indent: float = 0) -> None:
        with self.indented(indent + 2):
            self.style("M", SIZE - 1.5)
            self.set_text_color(0, 0, 0)
            self.set_fill_color(242, 242, 242)
            self.multi_cell(0, LINE - 0.6, self.clean(text.rstrip("\n")), align="L", fill=True,
                            new_x=XPos.LMARGIN, new_y=YPos.NEXT, padding=1)  # fmt: skip
        self.style("")
        self.ln(1.5)


_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def _inline(token: Token, bold: bool) -> list[Run]:
    runs: list[Run] = []
    strong = 0
    for child in token.children or []:
        if child.type == "strong_open":
            strong += 1
        elif child.type == "strong_close":
            strong -= 1
        elif child.type == "code_inline":
            runs.append((_text(child.content), "M"))
        elif child.type in ("softbreak", "hardbreak"):
            runs.append((" " if child.type == "softbreak" else "\n", ""))
        elif child.type in ("text", "html_inline"):
            runs.append((_text(child.content), "B" if bold or strong > 0 else ""))
        elif child.type == "image":
            runs.append((_text(child.content), ""))
    return runs


def _markdown(doc: _Document, text: str, *, indent: float = 0) -> None:
    """Markdown a chat wrote, drawn from markdown-it's tokens (never as markup)."""
    depth, bold, quoted = 0, False, 0
    numbers: list[int | None] = []  # per open list: the next number, None for bullets
    prefix = ""
    row: list[str] | None = None  # the cells of a table row so far
    for token in _MARKDOWN.parse(text):
        at = indent + INDENT * (depth + quoted)
        if token.type in ("bullet_list_open", "ordered_list_open"):
            start = token.attrGet("start")
            numbers.append(None if token.type == "bullet_list_open" else int(start or 1))
            depth += 1
        elif token.type in ("bullet_list_close", "ordered_list_close"):
            numbers.pop()
            depth -= 1
        elif token.type == "list_item_open" and numbers:
            number = numbers[-1]
            prefix = "• " if number is None else f"{number}. "
            if number is not None:
                numbers[-1] = number + 1
        elif token.type in ("blockquote_open", "blockquote_close"):
            quoted += 1 if token.type == "blockquote_open" else -1
        elif token.type in ("heading_open", "heading_close"):
            bold = token.type == "heading_open"
        elif token.type in ("fence", "code_block"):
            doc.code(_text(token.content), indent=at)
        elif token.type == "tr_open":
            row = []
        elif token.type == "tr_close" and row is not None:
            doc.runs([(" | ".join(row), "")], indent=at)
            row = None
        elif token.type == "inline" and row is not None:
            row.append("".join(t for t, _s in _inline(token, False)))
        elif token.type == "inline":
            doc.runs([(prefix, ""), *_inline(token, bold)], indent=at - (INDENT if prefix else 0))
            prefix = ""


def _sources(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in content.get("citations") or []
            if isinstance(c, dict) and str(c.get("n", "")).isdigit()]  # fmt: skip


def _where(citation: dict[str, Any]) -> str:
    if citation.get("kind") == "note":  # a note has no pages: its title says where
        return _one_line(citation.get("note_title"))
    try:
        page = int(citation.get("page") or 0) or None
    except (TypeError, ValueError):
        page = None
    return page_label(_one_line(citation.get("file")), page, _one_line(citation.get("where")))


def _said(doc: _Document, item: dict[str, Any], *, indent: float, quote: bool) -> None:
    """An item's statement: Markdown the chat wrote, or a quote in grey."""
    text = _text(item.get("back") or item.get("text"))
    if item.get("markdown"):
        _markdown(doc, text, indent=indent)
    else:
        doc.runs([(_one_line(text), "")], indent=indent, grey=quote)


def _letter(i: int) -> str:
    return chr(65 + i) if i < 26 else str(i + 1)


def _item(doc: _Document, output: StudioOutput, item: dict[str, Any], number: int) -> None:
    kind = output.kind
    if kind == StudioOutput.Kind.AUDIO:  # who says it, and when
        at = clock(item.get("start"))
        who = speaker_label(item, conversation=bool(output.model))
        doc.runs([(f"{f'[{at}] ' if at else ''}{who}: ", "B"), (_one_line(item.get("text")), "")])
    elif kind == StudioOutput.Kind.QUIZ:
        doc.runs([(f"{number}. {_one_line(item.get('question'))}", "B")])
        answer = item.get("answer")
        options = item.get("options") if isinstance(item.get("options"), list) else []
        for i, option in enumerate(options or []):
            right = i == answer and not isinstance(answer, bool)
            mark = "☑" if right else "☐"
            doc.runs([(f"{mark} {_letter(i)}. {_one_line(option)}", "B" if right else "")],
                     indent=INDENT)  # fmt: skip
        _said(doc, item, indent=INDENT, quote=True)
    elif item.get("question") or item.get("front"):
        doc.runs([(_one_line(item.get("question") or item.get("front")), "B")])
        _said(doc, item, indent=INDENT, quote=not item.get("markdown"))
    elif item.get("term"):
        doc.runs([(_one_line(item["term"]) + ": ", "B"), (_one_line(item.get("text")), "")])
    elif item.get("date"):
        when = date_label(item) or _one_line(item["date"])
        doc.runs([(when + ": ", "B"), (_one_line(item.get("text")), "")])
    elif item.get("cited", True):  # a quote in grey; a chat model's checked sentence not
        _said(doc, item, indent=INDENT, quote=not item.get("written"))
    else:
        doc.runs([("• " + _one_line(item.get("text")), "")])
    doc.ln(1.5)


def _outline(doc: _Document, root: dict[str, Any]) -> None:
    """A mind map node and its children as an indented outline (iterative: a deep tree is
    drawn, not a RecursionError)."""
    stack: list[tuple[dict[str, Any], int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        own = _one_line(node.get("text")) or _one_line(node.get("label"))
        doc.runs([("– " if depth else "", ""), (own, "" if depth else "B")],
                 indent=INDENT * depth)  # fmt: skip
        children = node.get("children") if isinstance(node.get("children"), list) else []
        stack += [(c, depth + 1) for c in reversed(children or []) if isinstance(c, dict)]


def _byline(output: StudioOutput) -> str:
    parts = [output.get_kind_display(), _one_line(output.notebook.title)]
    if output.created_by:
        parts.append(_("made by %(name)s") % {"name": _one_line(output.created_by.get_username())})
    if output.ready_at:
        parts.append(formats.date_format(timezone.localtime(output.ready_at), "DATETIME_FORMAT"))
    if output.generator:
        model = _one_line(output.model)
        said = str(output.get_generator_display())
        parts.append(f"{said} ({model})" if model else said)
    return " · ".join(p for p in parts if p)


def studio_pdf(output: StudioOutput) -> bytes:
    """A Studio output as a PDF: title, who made it and how, its sections and items by kind
    with their [n] markers, and the sources those markers name. Any content gives a PDF."""
    content = output.content if isinstance(output.content, dict) else {}
    title = _one_line(output.title) or str(output.get_kind_display())
    byline = _byline(output)
    doc = _Document(faces())
    doc.set_title(title)
    doc.set_creator("Notebook")
    if re.fullmatch(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*", output.language or ""):
        doc.set_lang(output.language)
    doc.add_page()
    doc.heading(title, 18)
    doc.set_text_color(*GREY)
    doc.style("", 8.5)
    doc.multi_cell(0, 4.2, doc.clean(byline), align="L",
                   new_x=XPos.LMARGIN, new_y=YPos.NEXT)  # fmt: skip
    doc.ln(3)
    sections = content.get("sections") if isinstance(content.get("sections"), list) else []
    for section in sections or []:
        if not isinstance(section, dict):
            continue
        items = section.get("items") if isinstance(section.get("items"), list) else []
        items = [item for item in items or [] if isinstance(item, dict)]
        if not items:
            continue
        if heading := _one_line(section.get("heading")):
            doc.heading(heading, 13)
        for number, item in enumerate(items, 1):
            if output.kind == StudioOutput.Kind.MIND_MAP:
                _outline(doc, item)
            else:
                _item(doc, output, item, number)
    if citations := _sources(content):
        doc.heading(_("Sources"), 13)
        for c in citations:
            quote = _one_line(c.get("quote"))
            said = f": “{quote}”" if quote else ""
            doc.runs([(f"[{c['n']}] ", "B"), (_where(c) + said, "")])
    return bytes(doc.output())
