"""The citation links carry what the PDF viewer panel needs (static/js/viewer.js): the file
without #page, the page, the quote, the file name and the page-text link, as data-viewer-*
attributes escaped for an attribute; note citations carry none and stay plain links."""

from __future__ import annotations

import pytest

from chat.models import Message
from chat.rendering import answer_html, sources
from tests.fixtures.markdown import elements

HOSTILE_QUOTE = "\"><img src=x onerror=alert(1)> & 'quoted' <b>bold</b>"
HOSTILE_FILE = 'a"b<c>.pdf'


def message(citations: list[dict[str, object]], content: str = "Cited [1].") -> Message:
    return Message(
        pk=7, role=Message.Role.ASSISTANT, status=Message.Status.COMPLETE, content=content,
        citations=citations, metadata={},
    )  # fmt: skip


def document(**extra: object) -> dict[str, object]:
    return {"n": 1, "kind": "document", "attachment_id": 41, "file": "url.pdf", "page": 3,
            "quote": "Breaks are not allowed between colons.", **extra}  # fmt: skip


def viewer_links(html: str) -> list[dict[str, str]]:
    return [attrs for tag, attrs in elements(html) if tag == "a" and "data-viewer-file" in attrs]


def test_a_document_chip_carries_the_viewer_attributes():
    msg = message([document()])
    html = str(answer_html(msg))
    (chip,) = viewer_links(html)
    assert chip["href"] == "/attachments/41/file/#page=3"  # without JavaScript: as before
    assert chip["target"] == "_blank"
    assert chip["data-viewer-file"] == "/attachments/41/file/"
    assert chip["data-viewer-page"] == "3"
    assert chip["data-viewer-quote"] == "Breaks are not allowed between colons."
    assert chip["data-viewer-title"] == "url.pdf"
    assert chip["data-viewer-text"] == (
        "/attachments/41/pages/?page=3&quote=Breaks+are+not+allowed+between+colons.#quote"
    )
    assert chip["data-testid"] == "citation-chip"


def test_hostile_quotes_and_file_names_stay_inside_their_attributes():
    msg = message([document(quote=HOSTILE_QUOTE, file=HOSTILE_FILE)])
    html = str(answer_html(msg))
    (chip,) = viewer_links(html)
    assert chip["data-viewer-quote"] == HOSTILE_QUOTE  # read back exactly: nothing broke out
    assert chip["data-viewer-title"] == HOSTILE_FILE
    assert [tag for tag, _ in elements(html)] == ["p", "span", "a", "span", "span", "q", "span",
                                                  "a", "a"]  # fmt: skip
    attrs = str(sources(msg)[0].viewer_attrs)
    assert "<" not in attrs
    assert "&quot;&gt;&lt;img" in attrs


@pytest.mark.parametrize("page", [1, 12])
def test_the_source_attributes_name_the_cited_page(page):
    (source,) = sources(message([document(page=page)]))
    assert source.file_url == "/attachments/41/file/"
    assert source.open_url == f"/attachments/41/file/#page={page}"
    assert f' data-viewer-page="{page}"' in str(source.viewer_attrs)
    assert str(source.viewer_attrs).startswith(' data-viewer-file="/attachments/41/file/"')


def test_a_note_citation_has_no_viewer_attributes():
    cited = {"n": 1, "kind": "note", "note_id": 5, "note_title": "Colons", "quote": "Colons."}
    msg = message([cited])
    (source,) = sources(msg)
    assert source.file_url == ""
    assert str(source.viewer_attrs) == ""
    html = str(answer_html(msg))
    assert viewer_links(html) == []
    assert "data-viewer" not in html


@pytest.mark.django_db
def test_the_conversation_page_holds_the_viewer_and_its_source_links_open_it(alice, alice_client):
    from chat import services
    from tests.factories import NotebookFactory
    from tests.fixtures.answers import answered, citation, html_of

    notebook = NotebookFactory.create(owner=alice, title="TeX")
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    answered(conversation, "Cited [1].", citations=[citation(1, quote=HOSTILE_QUOTE)])
    page = html_of(alice_client.get(f"/chats/{conversation.pk}/"))
    found = elements(page)
    (source,) = [a for tag, a in found if tag == "a" and a.get("data-testid") == "source-link"]
    assert source["href"] == "/attachments/41/file/#page=3"
    assert source["data-viewer-page"] == "3"
    assert source["data-viewer-quote"] == HOSTILE_QUOTE
    (panel,) = [a for tag, a in found if tag == "aside" and a.get("id") == "pdf-viewer"]
    assert "hidden" in panel  # nothing shows without JavaScript
    assert panel["data-pdfjs"].endswith("vendor/pdfjs-dist/build/pdf.min.mjs")
    assert panel["data-pdfjs-worker"].endswith("js/viewer-worker.mjs")
    scripts = [a.get("src", "") for tag, a in found if tag == "script"]
    assert any(src.endswith("js/viewer.js") for src in scripts)
    styles = [a.get("href", "") for tag, a in found if tag == "link"]
    assert any(href.endswith("css/viewer.css") for href in styles)
    assert any(href.endswith("vendor/pdfjs-dist/web/text_layer.css") for href in styles)
