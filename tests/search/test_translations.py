"""The search page speaks the browser's language (Accept-Language): German and Simplified
Chinese from the compiled catalogues in locale/, English otherwise; the API's JSON stays
English whatever the browser asks for (scripts match its values).

The results come from a sample PDF (text.pdf) ingested by the real pipeline; the PDFs still being
processed are real uploads whose ingestion has not run (it is queued on commit)."""

from __future__ import annotations

import re

import pytest

from attachments.services import attachment_ingest
from search import retrieval
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import upload

pytestmark = pytest.mark.django_db
QUERY = "survey notes"  # on every page of text.pdf

# Exact strings of the catalogues, by browser language: the <html lang>, the mode chosen, a hit's
# page, the summary (count, query), and the PDFs being processed in the singular and the plural.
EXPECTED: dict[str, dict[str, str]] = {
    "de": {
        "lang": '<html lang="de">',
        "mode": '<option value="lexical" selected>Genaue Wörter</option>',
        "page": r'<span class="hit-page">Seite \d+</span>',
        "summary": "{n} Treffer für „{q}“",
        "one": "1 PDF wird noch verarbeitet; danach ist es durchsuchbar.",
        "two": "2 PDFs werden noch verarbeitet; danach sind sie durchsuchbar.",
    },
    "zh-CN,zh;q=0.9,en;q=0.5": {
        "lang": '<html lang="zh-hans">',
        "mode": '<option value="lexical" selected>精确字词</option>',
        "page": r'<span class="hit-page">第 \d+ 页</span>',
        "summary": "找到 {n} 条关于“{q}”的结果",
        "one": "1 个 PDF 仍在处理中，处理完成后即可搜索。",
        "two": "2 个 PDF 仍在处理中，处理完成后即可搜索。",
    },
    "en-GB,en;q=0.8": {
        "lang": '<html lang="en">',
        "mode": '<option value="lexical" selected>Exact words</option>',
        "page": r'<span class="hit-page">page \d+</span>',
        "summary": "{n} results for “{q}”",
        "one": "1 PDF still being processed; it is searchable once ready.",
        "two": "2 PDFs still being processed; they are searchable once ready.",
    },
}


@pytest.fixture
def note(alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice, title="LaTeX"))
    attachment = upload(alice, note, "text.pdf")
    attachment_ingest(attachment_id=attachment.pk)
    attachment.refresh_from_db()
    assert attachment.status == "ready"
    return note


def _page(client, accept_language: str, **params: str) -> str:
    response = client.get(
        "/search/", {"q": QUERY, "mode": "lexical", **params}, HTTP_ACCEPT_LANGUAGE=accept_language
    )
    assert response.status_code == 200
    html: str = response.content.decode()
    return html


@pytest.mark.parametrize("accept_language", list(EXPECTED))
def test_the_search_page_follows_the_browsers_language(alice_client, alice, note, accept_language):
    expected = EXPECTED[accept_language]
    upload(alice, note, "broken.pdf")  # queued, not yet ingested
    page = _page(alice_client, accept_language)
    hits = page.count('<li class="card search-hit">')
    assert hits > 1  # the plural of the summary
    assert expected["lang"] in page
    assert expected["mode"] in page
    assert re.search(expected["page"], page)
    summary = expected["summary"].format(n=hits, q=QUERY)
    assert f'<p id="search-summary">{summary}</p>' in page
    assert expected["one"] in page

    upload(alice, note, "other.pdf")
    assert expected["two"] in _page(alice_client, accept_language)


def test_the_warm_up_notice_is_translated_on_the_page_but_not_in_the_api(
    alice_client, note, monkeypatch
):
    monkeypatch.setattr(retrieval, "warming_up", lambda: True)
    page = _page(alice_client, "de", mode="hybrid")
    assert (
        "Das Suchmodell startet: Diese Treffer passen nur zu deinen Wörtern; Treffer nach "
        "Bedeutung kommen in ein paar Sekunden dazu." in page
    )
    assert (
        "<dt>Vektorsuche</dt><dd>Suche nach Bedeutung nicht verfügbar: das Suchmodell lädt noch "
        "(der Server ist gerade erst gestartet)</dd>" in page
    )
    # The API answers the same browser in English: scripts match `info.degraded`.
    body = alice_client.get(
        "/api/search", {"q": QUERY, "mode": "hybrid"}, HTTP_ACCEPT_LANGUAGE="de"
    ).json()
    assert body["info"]["degraded"] == (
        "vector search unavailable: the search model is still loading (the server has just started)"
    )
