"""Guides without boilerplate, on purpose-built manuals (tests/guides/documents.py) ingested
through the real pipeline: search.boilerplate tells tables of contents, indexes, a licence two
unrelated manuals share and a licence appended off the subject from the chapters; guides never
quote, list or ask about them; key topics are phrases of the text; a source guide opens with
the document's own introduction; suggested questions are shown in the reader's language."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings
from django_q.models import OrmQ, Schedule

from attachments import services as attachment_services
from attachments.models import DocumentChunk, NoteAttachment
from grounding.evidence import sentences
from guides import services
from guides.models import Guide
from guides.services import content
from notes.models import Note
from notes.services import note_create, notebook_create
from search.boilerplate import Reason, boilerplate, boilerplate_chunks, contents_like
from tests.factories import UserFactory
from tests.guides import documents

pytestmark = pytest.mark.django_db


def ingest(user: User, note: Note, name: str, pages: list[list[documents.Block]]) -> NoteAttachment:
    uploaded = SimpleUploadedFile(name, documents.pdf(pages), "application/pdf")
    attachment = attachment_services.attachment_upload(user=user, note=note, uploaded=uploaded)
    attachment_services.attachment_ingest(attachment_id=attachment.pk)
    attachment.refresh_from_db()
    assert attachment.status == "ready", attachment.error
    return attachment


def written(guide: Guide) -> Guide:
    Guide.objects.filter(pk=guide.pk).update(not_before=None)
    services.guide_write(guide_id=guide.pk, token=guide.token)
    guide.refresh_from_db()
    assert guide.status == "ready", guide.error
    return guide


@pytest.fixture(scope="module")
def library(django_db_setup, django_db_blocker, tmp_path_factory):
    """Alice's notebook with two unrelated manuals that share a licence paragraph, and their
    offline guides; committed once for the module."""
    media = tmp_path_factory.mktemp("m")
    with django_db_blocker.unblock(), override_settings(MEDIA_ROOT=media, CHAT_MODEL=""):
        queued = set(OrmQ.objects.values_list("pk", flat=True))
        schedules = set(Schedule.objects.values_list("pk", flat=True))
        alice = UserFactory.create(username="alice")
        book = notebook_create(owner=alice, title="Hobbies")
        bees = ingest(alice, note_create(notebook=book, author=alice, title="Bees"), "bees.pdf",
                      documents.bees())  # fmt: skip
        sailing = ingest(alice, note_create(notebook=book, author=alice, title="Boats"),
                         "sailing.pdf", documents.sailing())  # fmt: skip
        guides = [
            written(services.guide_request_source(attachment=bees)),
            written(services.guide_request_source(attachment=sailing)),
            written(services.guide_request_notebook(notebook_id=book.pk)),
        ]
        try:
            yield SimpleNamespace(alice=alice, book=book, bees=bees, sailing=sailing,
                                  guides=guides)  # fmt: skip
        finally:
            User.objects.filter(username="alice").delete()
            OrmQ.objects.exclude(pk__in=queued).delete()
            Schedule.objects.exclude(pk__in=schedules).delete()


def chunks(*attachments: NoteAttachment, holding: str = "") -> list[DocumentChunk]:
    return list(DocumentChunk.objects.filter(attachment__in=attachments, content__contains=holding))


def said(guide: Guide) -> str:
    """Everything a guide shows as text, folded."""
    parts = [s["text"] for s in guide.summary] + [c["quote"] for s in guide.summary
                                                   for c in s["citations"]]  # fmt: skip
    parts += guide.topics + [q["text"] for q in guide.questions]
    return " ".join(" ".join(parts).split()).casefold()


# --- search.boilerplate


def test_contents_and_index_lines_are_told_from_prose_and_tables():
    assert contents_like("In this booklet\n1 Introduction . . . 4\n2 Hives . . . 5\n3 Swarms . . 9")
    assert contents_like("Index\nA\nbeeswax, 12\nbrood chamber, 5, 6\ndrones, 6\nframes, 5–7")
    assert contents_like("1.1 概述 . . . . . 1\n1.2 第一次使用 LATEX . . . 3\n2 排版文字 11\nvii")
    assert not contents_like(
        "The queen may lay two thousand eggs a day in June. Workers live six weeks in\n"
        "summer and about 20\nweeks in winter, when the colony clusters on the comb."
    )
    assert not contents_like("Year Colonies Honey\n2019 12 240\n2020 14 310\n2021 15 295")


def test_a_shared_licence_contents_index_and_an_appendix_off_the_subject_are_boilerplate(library):
    every = chunks(library.bees, library.sailing)
    found = boilerplate(c.pk for c in every)
    licence = chunks(library.bees, library.sailing, holding="Permission is granted to copy, print")
    assert len(licence) == 2
    assert {found.get(c.pk) for c in licence} == {Reason.REPEATED}
    for chunk in chunks(library.bees, library.sailing, holding=documents.CONTENTS):
        assert found.get(chunk.pk) == Reason.CONTENTS
    (index,) = chunks(library.bees, holding="brood chamber, 5")
    assert found.get(index.pk) == Reason.CONTENTS
    (terms,) = chunks(library.bees, holding="The following terms govern")
    assert found.get(terms.pk) == Reason.ASIDE
    chapters = [c for c in every if c.page_number >= 4 and c.pk not in (index.pk, terms.pk)]
    assert chapters
    assert not [c.content[:60] for c in chapters if c.pk in found]
    assert boilerplate_chunks(c.pk for c in chapters) == set()
    assert boilerplate_chunks([]) == set()


def test_another_version_of_a_manual_is_no_reason_to_call_its_chapters_boilerplate(library):
    notebook = notebook_create(owner=library.alice, title="Old copies")
    note = note_create(notebook=notebook, author=library.alice, title="Bees, 1.1")
    again = ingest(library.alice, note, "bees-1.1.pdf", documents.bees(version="1.1"))
    assert again.sha256 != library.bees.sha256
    chapters = [c for c in chunks(library.bees) if 4 <= c.page_number <= 31]
    copies = {c.content for c in chunks(again)}
    assert all(c.content in copies for c in chapters)  # the same text, every chapter
    assert boilerplate(c.pk for c in chapters) == {}
    (licence,) = chunks(library.bees, holding="Permission is granted to copy, print")
    assert boilerplate([licence.pk]) == {licence.pk: Reason.REPEATED}  # the sailing manual's


def test_another_users_copy_of_a_licence_is_no_evidence(library, bob):
    notebook = notebook_create(owner=bob, title="Bees")
    note = note_create(notebook=notebook, author=bob, title="Bees")
    his = ingest(bob, note, "bees.pdf", documents.bees(version="2.0"))
    (licence,) = chunks(his, holding="Permission is granted to copy, print")
    # Alice's two manuals hold the same paragraph; Bob's library holds it once.
    assert boilerplate([licence.pk]).get(licence.pk) != Reason.REPEATED


# --- guides


def test_a_licence_paragraph_repeated_in_two_documents_never_appears_in_a_guide(library):
    flagged = boilerplate_chunks(c.pk for c in chunks(library.bees, library.sailing))
    licence = [s.casefold()[:40] for s in sentences(documents.LICENCE)]
    terms = [s.casefold()[:40] for p in documents.REUSE_TERMS[1] for s in sentences(p)]
    for guide in library.guides:
        text = said(guide)
        assert guide.summary, guide.kind
        assert guide.topics, guide.kind
        assert guide.questions, guide.kind
        assert not [s for s in licence + terms if s in text], guide.kind
        assert "terms of reuse" not in text
        assert not {q["chunk_id"] for q in guide.questions} & flagged, guide.questions
        pages = {(c["attachment_id"], c["page"]) for s in guide.summary for c in s["citations"]}
        assert not pages & {(library.bees.pk, 2), (library.sailing.pk, 2)}


@pytest.mark.parametrize(
    ("sentence", "good"),
    [
        ("When the rules change, the printed page looks different. h a h a h h h h h h h h "
         "h h h Formatting rules are variables with defaults too.", False),
        ("If a and b are two numeric arrays, their outer product is an array of both.", True),
        ("The grey heron waits motionless by the millpond until dusk, and then it flies.", True),
    ],
)  # fmt: skip
def test_a_sentence_strewn_with_glyphs_is_not_quoted(sentence, good):
    assert content.good_sentence(sentence) is good


def test_a_table_of_contents_with_dot_leaders_yields_no_question(library):
    contents = {c.pk for c in chunks(library.bees, library.sailing, holding=documents.CONTENTS)}
    assert len(contents) == 2
    for guide in library.guides:
        for question in guide.questions:
            assert question["chunk_id"] not in contents
            asked = question.get("subject", question["text"])
            assert not re.search(r"\. \.|\.{2}|\d+\s*[”?]*$", asked), question
            assert documents.CONTENTS not in question["text"]
            # A section question is answered under that very heading.
            if question.get("template") == "section":
                answer = DocumentChunk.objects.get(pk=question["chunk_id"])
                assert question["subject"] in answer.heading_path
        assert documents.CONTENTS not in [e["text"] for e in guide.outline]


def test_key_topics_are_phrases_of_the_text_not_the_author_line_or_headings(library):
    for guide, attachment in zip(library.guides, (library.bees, library.sailing), strict=False):
        text = " ".join(" ".join(p.text.split()) for p in attachment.pages.all()).casefold()
        headings = {e["text"].casefold() for e in guide.outline}
        headings |= {re.sub(r"^\d+ ", "", h) for h in headings}
        assert len(guide.topics) >= 3
        for topic in guide.topics:
            assert topic.casefold() in text, topic
            assert topic.casefold() not in headings, topic
            assert topic.casefold() not in documents.AUTHOR.casefold(), topic
            assert topic.casefold() not in guide.title.casefold(), topic


def test_a_source_guide_opens_with_the_documents_own_introduction(library):
    bees = library.guides[0]
    introduction = " ".join(documents.BEE_CHAPTERS[0][1])
    assert bees.summary[0]["lead"]
    for sentence in bees.summary:
        assert sentence["lead"]
        assert sentence["quoted"]
        assert sentence["text"] in introduction


def test_a_notebook_guide_says_what_each_source_is_about_in_its_own_words(library):
    """One sentence per source, in the notebook's order: the opening of the document's own
    introduction when it has one (bees), else its most central sentence (sailing)."""
    notebook = library.guides[2]
    files = [s["citations"][0]["file"] for s in notebook.summary]
    assert files == ["bees.pdf", "sailing.pdf"]
    bees, sailing = notebook.summary
    assert bees["lead"]
    assert bees["text"] in " ".join(documents.BEE_CHAPTERS[0][1])
    assert not sailing["lead"]
    assert sailing["text"] in " ".join(" ".join(p) for _, p in documents.SAIL_CHAPTERS)
    assert all(s["quoted"] for s in notebook.summary)
    client = Client()
    client.force_login(library.alice)
    page = client.get(f"/notebooks/{library.book.pk}/guide/").content.decode()
    assert "Each source in its own words: the opening of its introduction" in page


def test_suggested_questions_are_shown_in_the_readers_language(library, alice_client, alice_api):
    guide = library.guides[0]
    sections = [q for q in guide.questions if q["template"] == "section"]
    assert sections
    url = f"/attachments/{library.bees.pk}/guide/"
    german = alice_client.get(url, headers={"HX-Request": "true"}, HTTP_ACCEPT_LANGUAGE="de")
    html = german.content.decode()
    assert f"Was erklärt der Abschnitt „{sections[0]['subject']}“?" in html
    assert "Aus der Einleitung des Dokuments zitiert" in html
    chinese = alice_client.get(url, headers={"HX-Request": "true"}, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert f"“{sections[0]['subject']}”一节讲了什么？" in chinese.content.decode()
    english = alice_client.get(url, headers={"HX-Request": "true"}, HTTP_ACCEPT_LANGUAGE="en")
    assert f"What does the section “{sections[0]['subject']}” explain?" in english.content.decode()
    # The API stays English and says what kind of question it is.
    body = alice_api.get(f"/api/attachments/{library.bees.pk}/guide").json()
    asked: dict[str, Any] = body["questions"][guide.questions.index(sections[0])]
    assert asked["text"] == f"What does the section “{sections[0]['subject']}” explain?"
    assert (asked["template"], asked["subject"]) == ("section", sections[0]["subject"])
