"""A web page or an HTML file read into units, one per section (#35).

trafilatura finds the main text (navigation, sidebars, cookie banners, ads and comments left
out) and keeps its structure: headings, paragraphs, lists, tables, quotes and code; htmldate
(through trafilatura) finds the publication date. Each section, a heading and what follows it
up to the next heading, becomes a `Unit` labelled by its heading path ("Install › On Debian");
text before the first heading is labelled with the page title. A lone top heading (the page's
own h1) names the page rather than prefixing every label. A section longer than
`UNIT_CHARS` is split at paragraph (else word) boundaries, the parts labelled "… (2)", "… (3)".

The page is untrusted: the units hold plain text only. Scripts, styles, iframes, forms and
comments never reach it; links keep their text and lose their URLs; images are dropped.
lxml parses HTML without expanding DOCTYPE entities, and the input is capped at
`MAX_HTML_BYTES`.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass

import trafilatura
from django.utils.translation import gettext

from attachments.formats import FormatError, Unit
from core.textutil import clip

MAX_HTML_BYTES = 10 * 1024 * 1024
UNIT_CHARS = 4000
LABEL_HEADING_CHARS = 80  # each heading in a label; the whole heading starts the unit's text
LABEL_SEPARATOR = " › "
_HEADING_LEVEL = re.compile(r"h([1-6])")
_BLANKS = re.compile(r"\s+")


@dataclass
class WebPage:
    title: str
    date: str | None  # ISO 8601 (YYYY-MM-DD): when the page says it was published
    units: list[Unit]


def read_html(html: bytes | str, *, url: str | None = None) -> WebPage:
    """The page's main text as units, one per section; FormatError when it has none."""
    size = len(html) if isinstance(html, bytes) else len(html.encode("utf-8", "replace"))
    if size > MAX_HTML_BYTES:
        raise FormatError(
            gettext("The page is larger than %(size)d MB; Notebook reads pages up to that size.")
            % {"size": MAX_HTML_BYTES // (1024 * 1024)}
        )
    if not html.strip():
        raise FormatError(gettext("The page is empty."))
    page = _page(_extract(html, url=url), url=url)
    if page is None:
        # A fragment ("<p>…</p>", no <html> or doctype) is not taken for HTML by trafilatura.
        page = _page(_extract(_wrapped(html), url=url), url=url)
    if page is None:
        raise FormatError(gettext("Notebook found no readable text on this page."))
    return page


def _page(extracted: str | None, *, url: str | None) -> WebPage | None:
    if not extracted:
        return None
    # trafilatura's own serialisation (lxml escapes the page's text; it writes no DOCTYPE, so
    # there is no entity to expand), read with the standard library's parser.
    doc = ET.fromstring(extracted)  # noqa: S314
    main = doc.find("main")
    blocks = list(main) if main is not None else []
    title = _clean(doc.get("title") or "")
    label = clip(title or _fallback_title(url, blocks), LABEL_HEADING_CHARS)
    units = list(_units(blocks, title=label))
    if not units:
        return None
    return WebPage(title=title or units[0].label, date=doc.get("date") or None, units=units)


def _extract(html: bytes | str, *, url: str | None) -> str | None:
    return trafilatura.extract(
        html,
        url=url,
        output_format="xml",
        with_metadata=True,
        include_comments=False,
        include_tables=True,
        include_images=False,
        include_links=False,
        include_formatting=False,
        date_extraction_params={"extensive_search": True, "original_date": True},
    )


def _wrapped(html: bytes | str) -> bytes | str:
    if isinstance(html, bytes):
        return b"<html><body>" + html + b"</body></html>"
    return f"<html><body>{html}</body></html>"


def _fallback_title(url: str | None, blocks: list[ET.Element]) -> str:
    for block in blocks:
        if block.tag == "head" and _clean(_text(block)):
            return _clean(_text(block))
    return url or gettext("Web page")


def _level(head: ET.Element) -> int:
    match = _HEADING_LEVEL.fullmatch(head.get("rend") or "")
    return int(match.group(1)) if match else 2


def _units(blocks: list[ET.Element], *, title: str) -> Iterator[Unit]:
    heads = [(_level(b), _clean(_text(b))) for b in blocks if b.tag == "head"]
    heads = [(level, text) for level, text in heads if text]
    # A page whose first heading is its only one at the top level (an article's h1): that
    # heading names the page, and the sections below it are labelled without it.
    page_heading = None
    if heads:
        top = min(level for level, _ in heads)
        if heads[0][0] == top and sum(1 for level, _ in heads if level == top) == 1:
            page_heading = heads[0]
    stack: list[tuple[int, str]] = []
    heading: str | None = None
    label = title
    body: list[str] = []
    number = 0

    def flush() -> Iterator[Unit]:
        nonlocal number
        for index, part in enumerate(_split(body)):
            number += 1
            text = f"{heading}\n\n{part}" if heading else part
            yield Unit(
                number=number, text=text, label=label if index == 0 else f"{label} ({index + 1})"
            )

    for block in blocks:
        if block.tag == "head":
            text = _clean(_text(block))
            if not text:
                continue
            yield from flush()
            body = []
            level = _level(block)
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text))
            path = [t for entry in stack if entry != page_heading for t in entry[1:]]
            heading = text
            label = LABEL_SEPARATOR.join(clip(t, LABEL_HEADING_CHARS) for t in path or [text])
            continue
        rendered = _render(block)
        if rendered:
            body.append(rendered)
    yield from flush()


def _split(blocks: list[str]) -> Iterator[str]:
    """Blocks joined into parts of at most UNIT_CHARS, cut between blocks where possible."""
    part: list[str] = []
    size = 0
    for block in blocks:
        for piece in _pieces(block):
            if part and size + len(piece) + 2 > UNIT_CHARS:
                yield "\n\n".join(part)
                part, size = [], 0
            part.append(piece)
            size += len(piece) + 2
    if part:
        yield "\n\n".join(part)


def _pieces(block: str) -> Iterator[str]:
    while len(block) > UNIT_CHARS:
        cut = block.rfind(" ", UNIT_CHARS // 2, UNIT_CHARS)
        cut = cut if cut > 0 else UNIT_CHARS
        yield block[:cut].rstrip()
        block = block[cut:].lstrip()
    if block:
        yield block


def _render(block: ET.Element) -> str:
    """One block of trafilatura's XML as plain text: lists as "- item", tables row by row."""
    if block.tag == "list":
        return "\n".join(_list_lines(block, depth=0))
    if block.tag == "table":
        rows = []
        for row in block.iter("row"):
            cells = [_clean(_text(cell)) for cell in row.findall("cell")]
            if any(cells):
                rows.append(" | ".join(cells))
        return "\n".join(rows)
    if block.tag == "code":
        return _text(block).strip("\n")
    return _clean(_text(block))


def _list_lines(block: ET.Element, *, depth: int) -> Iterator[str]:
    for item in block.findall("item"):
        nested = item.findall("list")
        own = _clean(_text(item, skip=set(nested)))
        if own:
            yield f"{'  ' * depth}- {own}"
        for sub in nested:
            yield from _list_lines(sub, depth=depth + 1)


def _text(element: ET.Element, *, skip: set[ET.Element] | None = None) -> str:
    """The element's text, line breaks (<lb/>) kept as spaces, `skip`ped subtrees left out."""
    parts: list[str] = []

    def walk(node: ET.Element) -> None:
        if node.text:
            parts.append(node.text)
        for child in node:
            if skip and child in skip:
                pass
            elif child.tag == "lb":
                parts.append("\n" if element.tag == "code" else " ")
            else:
                walk(child)
            if child.tail:
                parts.append(child.tail)

    walk(element)
    return "".join(parts)


def _clean(text: str) -> str:
    return _BLANKS.sub(" ", text).strip()
