"""Studio outputs written offline from real ingested PDFs (purpose-built manuals that share a
licence, with a table of contents and an index: tests/guides/documents.py): every output
generates, every statement carries a citation whose quote is on its page, and no licence,
contents or index text appears."""

from __future__ import annotations

import re

import pytest

from attachments.models import DocumentPage
from grounding.citations import MARKER, normalise, quotable
from studio import services
from studio.models import StudioOutput
from tests.guides import documents

pytestmark = pytest.mark.django_db


MARKER_NUMBER = re.compile(r"\[(\d+)\]")


def written(library, kind: str, **scope) -> StudioOutput:
    output = services.output_create(user=library.alice, notebook_id=library.book.pk, kind=kind,
                                    **scope)  # fmt: skip
    services.output_write(output_id=output.pk, token=output.token)
    output.refresh_from_db()
    assert output.status == "ready", output.error
    return output


def statements(output: StudioOutput) -> list[str]:
    """Every text of the output that may cite, mind map nodes included."""

    def texts(item):
        own = [item[k] for k in ("text", "back") if isinstance(item.get(k), str) and item[k]]
        return own + [t for child in item.get("children") or [] for t in texts(child)]

    return [t for s in output.content["sections"] for item in s["items"] for t in texts(item)]


def assert_every_citation_verified(output: StudioOutput) -> None:
    citations = {c["n"]: c for c in output.content["citations"]}
    assert citations
    for text in statements(output):
        for n in MARKER.findall(text):
            c = citations[int(n)]
            page = DocumentPage.objects.get(attachment_id=c["attachment_id"], number=c["page"])
            assert normalise(c["quote"]) in quotable(page.text)
    # Numbered in order of first use, none unused.
    used = [int(n) for t in statements(output) for n in MARKER.findall(t)]
    assert sorted(set(used)) == sorted(citations) == list(range(1, len(citations) + 1))


def everything_said(output: StudioOutput) -> str:
    parts = statements(output) + [c["quote"] for c in output.content["citations"]]
    return " ".join(" ".join(parts).split()).casefold()


def assert_no_boilerplate(output: StudioOutput) -> None:
    said = everything_said(output)
    assert "permission is granted" not in said  # the shared licence
    assert documents.CONTENTS.casefold() not in said  # the table of contents
    assert ". . ." not in said


@pytest.mark.parametrize("kind", ["briefing", "study_guide", "faq", "flashcards", "quiz"])
def test_each_report_is_cited_quote_by_quote_without_boilerplate(library, kind):
    output = written(library, kind)
    assert output.progress == 100
    assert output.generator == "offline"
    assert output.title
    assert_every_citation_verified(output)
    assert_no_boilerplate(output)
    # Every statement that is shown as fact cites its quote.
    for section in output.content["sections"]:
        for item in section["items"]:
            if item.get("cited", True):
                assert MARKER.search(item.get("text") or item.get("back") or ""), item


def test_a_briefing_summarises_each_source_and_groups_key_points_by_section(library):
    output = written(library, "briefing")
    headings = [s["heading"] for s in output.content["sections"]]
    assert headings[0] == "Summary"
    files = {c["file"] for c in output.content["citations"]}
    assert {"bees.pdf", "sailing.pdf"} <= files
    assert len(headings) >= 3
    # The summary: a sentence per source in its own words, bees.pdf's its introduction's opening.
    summary = output.content["sections"][0]["items"]
    file_of = {str(c["n"]): c["file"] for c in output.content["citations"]}
    said = [file_of[n] for item in summary for n in MARKER_NUMBER.findall(item["text"])]
    assert said == ["bees.pdf", "sailing.pdf", "history.pdf"], summary
    opening = MARKER_NUMBER.sub("", summary[0]["text"]).strip()
    assert opening in " ".join(documents.BEE_CHAPTERS[0][1])


def test_a_timeline_lists_the_dated_events_in_order(library):
    others = f'["attachment:{library.bees.pk}", "attachment:{library.sailing.pk}"]'
    output = written(library, "timeline", selections=None, excluded=others)
    assert [r for r in output.scope if r.startswith("attachment:")] == [
        f"attachment:{library.history.pk}"
    ]
    events = output.content["sections"][0]["items"]
    dates = [e["date"] for e in events]
    assert dates == sorted(dates)
    assert dates[0].startswith("1852")
    assert "1921-03-03" in dates
    assert dates[-1].startswith("1953")
    assert_every_citation_verified(output)
    assert {c["file"] for c in output.content["citations"]} == {"history.pdf"}


def test_a_mind_map_is_the_outline_and_the_key_topics_each_node_cited(library):
    output = written(library, "mind_map")
    (root,) = output.content["sections"][0]["items"]
    assert root["label"] == "Hobbies"
    labels = [child["label"] for child in root["children"]]
    assert "Keeping Honey Bees" in labels
    assert "Small Boat Sailing" in labels
    bees = root["children"][labels.index("Keeping Honey Bees")]
    sections = [c["label"] for c in bees["children"]]
    assert "1 Introduction" in sections
    assert documents.REUSE_TERMS[0] not in sections  # the licence appended at the back
    assert_every_citation_verified(output)
    assert_no_boilerplate(output)


def test_a_quiz_blanks_the_answer_and_offers_it_among_other_key_phrases(library):
    output = written(library, "quiz")
    items = output.content["sections"][0]["items"]
    assert items
    for item in items:
        answer = item["options"][item["answer"]]
        assert "_____" in item["question"]
        assert len(item["options"]) >= 2
        assert len(set(item["options"])) == len(item["options"])
        quote = MARKER.sub("", item["text"]).strip()
        assert re.sub(re.escape(answer), "_____", quote, count=1, flags=re.I) == item["question"]


def test_a_study_guide_defines_the_sections_concepts_with_their_own_sentences(library):
    output = written(library, "study_guide")
    concepts = {i["term"]: i["text"] for i in output.content["sections"][0]["items"]}
    assert "Swarming" in concepts  # a section's name, defined where the section says what it is
    assert concepts["Swarming"].startswith("Swarming is how a colony reproduces")
