"""The search page and /api/search: results, scores, states, and isolation."""

from __future__ import annotations

import pytest

from search.views import highlight
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.search import make_attachment

pytestmark = pytest.mark.django_db
CANARY = "zqxjcanary"


@pytest.fixture
def library(alice, bob):
    mine = NoteFactory.create(notebook=NotebookFactory.create(owner=alice, title="Mine"))
    bobs = NoteFactory.create(notebook=NotebookFactory.create(owner=bob, title="Bob's"))
    attachment = make_attachment(
        mine, ["Use sink to divert output to a log file.", "Plots and graphics."], config="english"
    )
    bob_attachment = make_attachment(bobs, [f"{CANARY} sink secret of bob"], config="english")
    return {"mine": mine, "bobs": bobs, "attachment": attachment, "bob_attachment": bob_attachment}


def test_search_page_shows_hits_with_file_page_snippet_and_scores(alice_client, library):
    page = alice_client.get("/search/", {"q": "sink output", "mode": "lexical"}).content.decode()
    assert ">x.pdf</a>" in page
    assert '<span class="hit-page">page 1</span>' in page
    assert "<mark>sink</mark>" in page
    assert f"/attachments/{library['attachment'].pk}/file/#page=1" in page
    # Scores and timings are there for whoever wants them, behind collapsed Details.
    details = page[page.index('<details class="hit-details">') :]
    assert "BM25" in details
    assert '<details class="search-details" id="search-details">' in page
    assert " ms in all" in page
    assert '<details class="hit-details" open' not in page


def test_search_page_states(alice_client, alice):
    assert "Nothing to search yet." in alice_client.get("/search/").content.decode()


def test_search_page_no_results(alice_client, library):
    page = alice_client.get("/search/", {"q": "nonexistentword", "mode": "lexical"})
    assert "Nothing matched." in page.content.decode()


def test_search_page_refuses_huge_queries(alice_client, library):
    page = alice_client.get("/search/", {"q": "x" * 2001}).content.decode()
    assert "Keep the question under 2,000 characters." in page


def test_notebook_search_of_another_user_is_404(alice_client, library):
    url = f"/notebooks/{library['bobs'].notebook_id}/search/"
    assert alice_client.get(url, {"q": "sink"}).status_code == 404


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_the_canary_never_reaches_alice(alice_client, alice_api, library, mode):
    # The query echoes the canary; bob's text ("… secret of bob") must never come back.
    page = alice_client.get("/search/", {"q": f"{CANARY} sink secret", "mode": mode})
    assert "of bob" not in page.content.decode()
    api = alice_api.get("/api/search", {"q": f"{CANARY} sink secret", "mode": mode})
    assert api.status_code == 200
    assert all(CANARY not in hit["content"] for hit in api.json()["hits"])
    assert "of bob" not in api.content.decode()


def test_api_search_returns_scores_and_timings(alice_api, library):
    body = alice_api.post(
        "/api/search", {"q": "sink log file", "mode": "lexical", "limit": 5},
        content_type="application/json",
    ).json()  # fmt: skip
    top = body["hits"][0]
    assert top["file"] == "x.pdf"
    assert top["page"] == 1
    assert top["lexical"] > 0
    assert top["lexical_rank"] == 1
    assert top["vector"] is None
    assert "lexical" in body["timings_ms"]


@pytest.mark.parametrize("field", ["notebook_id", "note_id", "attachment_ids"])
def test_api_search_filters_naming_another_users_objects_are_404(alice_api, library, field):
    ids = {
        "notebook_id": library["bobs"].notebook_id,
        "note_id": library["bobs"].pk,
        "attachment_ids": [library["bob_attachment"].pk],
    }
    response = alice_api.post(
        "/api/search", {"q": "sink", field: ids[field]}, content_type="application/json"
    )
    assert response.status_code == 404


def test_api_search_rejects_empty_queries(alice_api):
    response = alice_api.get("/api/search", {"q": "   "})
    assert response.status_code == 422


def test_highlight_escapes_html_and_marks_terms():
    html = str(highlight("<script>x</script> the sink is here", "sink <script>"))
    assert "<script>" not in html
    assert "&lt;<mark>script</mark>&gt;" in html
    assert "<mark>sink</mark>" in html


def test_highlight_marks_whole_words_not_stop_words_or_fragments():
    html = str(
        highlight("Executing commands in a file: the sink function", "how do I sink in file")
    )
    assert "<mark>sink</mark>" in html
    assert "<mark>file</mark>" in html
    assert "Execut<mark>" not in html
    assert "<mark>in</mark>" not in html
    assert "人工<mark>智能</mark>" in str(highlight("人工智能", "智能"))


def test_notes_appear_beside_pdfs_with_a_badge(alice_client, alice_api, alice, library):
    from notes.services import note_create

    note = note_create(
        notebook=library["mine"].notebook, author=alice, title="Sink notes", body="my sink log"
    )
    page = alice_client.get("/search/", {"q": "sink log", "mode": "lexical", "notes": "on"})
    html = page.content.decode()
    assert 'class="badge note-badge">note</span>' in html
    assert f'href="/notes/{note.pk}/"' in html
    assert '<span class="badge">PDF</span>' in html
    without = alice_client.get(
        "/search/", {"q": "sink log", "mode": "lexical", "sent": "1"}
    ).content.decode()
    assert "note-badge" not in without  # the form sent without the box ticked
    # A link without the form's marker (a first visit) gets the default: notes included.
    linked = alice_client.get("/search/", {"q": "sink log", "mode": "lexical"}).content.decode()
    assert "note-badge" in linked
    assert 'name="notes" checked' in linked
    hits = alice_api.get("/api/search", {"q": "sink log", "mode": "lexical"}).json()["hits"]
    kinds = {hit["kind"] for hit in hits}
    assert kinds == {"note", "pdf"}
    note_hit = next(hit for hit in hits if hit["kind"] == "note")
    assert note_hit["note_id"] == note.pk
    assert note_hit["page"] is None
    files_only = alice_api.get(
        "/api/search", {"q": "sink log", "mode": "lexical", "include_notes": False}
    ).json()["hits"]
    assert {hit["kind"] for hit in files_only} == {"pdf"}


def test_search_page_filters_by_file_and_note(alice_client, alice, library):
    other_note = NoteFactory.create(notebook=library["mine"].notebook, title="Other")
    other = make_attachment(other_note, ["sink in another file"], config="english")
    page = alice_client.get(
        "/search/", {"q": "sink", "mode": "lexical", "file": other.pk}
    ).content.decode()
    assert "another file" in page
    assert "divert output" not in page
    assert f'<option value="{other.pk}" selected>' in page
    page = alice_client.get(
        "/search/", {"q": "sink", "mode": "lexical", "note": library["mine"].pk}
    ).content.decode()
    assert "divert output" in page
    assert "another file" not in page


@pytest.mark.parametrize("field", ["notebook", "note", "file"])
def test_search_page_filters_naming_another_users_objects_are_404(alice_client, library, field):
    ids = {
        "notebook": library["bobs"].notebook_id,
        "note": library["bobs"].pk,
        "file": library["bob_attachment"].pk,
    }
    assert alice_client.get("/search/", {"q": "sink", field: ids[field]}).status_code == 404


def test_api_search_reports_how_it_ranked(alice_api, library):
    body = alice_api.get("/api/search", {"q": "sink log file", "mode": "hybrid"}).json()
    assert body["info"]["fusion"] == "rrf"
    assert body["info"]["query_language"] == ""  # too short to tell
    assert body["info"]["weights"] == {"lexical": 1.0, "vector": 1.0}


def test_snippets_read_as_text_on_the_page_and_in_the_api(alice_client, alice_api, alice, library):
    from notes.services import note_create

    note_create(
        notebook=library["mine"].notebook, author=alice, title="Sinks",
        body="## Where output goes\n\nUse **sink** to divert *output*; see [docs](https://x.org).",
    )  # fmt: skip
    library["attachment"].chunks.update(heading_path=["1 Output", "Sinks"])
    page = alice_client.get("/search/", {"q": "sink divert", "mode": "lexical"}).content.decode()
    assert '<span class="hit-heading">1 Output › Sinks</span>' in page
    assert (
        "Where output goes · Use <mark>sink</mark> to <mark>divert</mark> output; see docs." in page
    )
    assert "**" not in page
    hits = alice_api.get("/api/search", {"q": "sink divert", "mode": "lexical"}).json()["hits"]
    note_hit = next(hit for hit in hits if hit["kind"] == "note")
    assert note_hit["snippet"] == "Where output goes · Use sink to divert output; see docs."
    assert note_hit["content"].startswith("Sinks\n## Where output goes")  # unchanged
    pdf_hit = next(hit for hit in hits if hit["kind"] == "pdf")
    assert pdf_hit["snippet"] == "Use sink to divert output to a log file."
    assert pdf_hit["heading"] == "1 Output › Sinks"


def test_a_snippet_reads_words_cut_at_line_ends_whole():
    from attachments.models import DocumentChunk
    from notes.models import Note
    from search.retrieval import Hit
    from search.snippets import highlight, readable_text

    chunk = DocumentChunk(content="given by the two com-\nmands (list macros)")
    hit = Hit(kind="document", note=Note(), chunk=chunk)
    text = readable_text(hit)
    assert text == "given by the two commands (list macros)"
    assert "<mark>commands</mark>" in str(highlight(text, "commands"))
