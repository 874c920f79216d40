"""Follow-ups that keep the thread: offline, a question is searched as asked with the turn before
as its context unless the sources say the topic changed; with a chat model, the model's rewrite
and its fallbacks; source anchoring in search; and what the page shows."""

from __future__ import annotations

import pytest

from attachments.services.ingestion import attachment_reembed
from chat import services
from chat.agent import generate
from chat.models import Message
from chat.reformulation import in_context, reformulate
from search.retrieval import Scope, search
from tests.factories import NotebookFactory, NoteFactory
from tests.fake_chat import Hang, Metadata, Refusal, Status, fake_chat_server
from tests.fixtures.search import make_attachment

GRID = "To arrange several plots on one page as a grid, call par(mfrow=c(2,3)) before plotting."
SIBLING = "The sibling setting mfcol takes the same two numbers and fills the figures by column."
VAGUE = "Isn't there a near-identical alternative? What changes if I use that one instead?"
ROUTES = [
    "Each alternative route changes trains at the station; use that one instead of the bridge.",
    "A near-identical alternative timetable changes little: use it when the road is closed.",
]
NETCDF = "The ncdf4 package reads netCDF and HDF5 data files into R, variable by variable."


def _attachment(hit):
    """The document a search hit comes from (a test's hits are documents)."""
    assert hit.attachment is not None
    return hit.attachment


def _document(note, texts, pages=None):
    """A ready, embedded document whose chunks are `texts`, on `pages` (default all page 1)."""
    attachment = make_attachment(note, texts)
    for chunk, page in zip(attachment.chunks.order_by("index"), pages or [], strict=False):
        chunk.page_number = page
        chunk.save()
    attachment_reembed(attachment_id=attachment.pk)
    attachment.refresh_from_db()
    assert attachment.status == "ready"
    return attachment


def _turn(conversation, question, answer, *, citations=None, retrieved=None):
    asked = Message.objects.create(conversation=conversation, role="user", content=question)
    Message.objects.create(
        conversation=conversation, role="assistant", content=answer, reply_to=asked,
        citations=citations or [], retrieved=retrieved or [],
    )  # fmt: skip
    return asked


def _cited(chunk):
    return {"n": 1, "kind": "document", "attachment_id": chunk.attachment_id,
            "chunk_id": chunk.pk, "page": chunk.page_number, "quote": chunk.content}  # fmt: skip


def _found(chunk):
    return {"n": 1, "kind": "document", "id": chunk.pk, "attachment_id": chunk.attachment_id,
            "page": chunk.page_number}  # fmt: skip


@pytest.fixture
def thread(alice):
    """A notebook with a document about plot grids (the sibling setting five pages on), one of
    travel routes whose words a vague follow-up shares, and one about netCDF; and a
    conversation whose first answer cited the grid passage."""
    notebook = NotebookFactory.create(owner=alice)
    note = NoteFactory.create(notebook=notebook)
    plots = _document(note, [GRID, SIBLING], pages=[1, 6])
    routes = _document(note, ROUTES)
    data = _document(note, [NETCDF, "Binary connections read raw bytes from a file."])
    conversation = services.conversation_create(owner=alice, notebook=notebook, note=note)
    grid = plots.chunks.get(content=GRID)
    _turn(
        conversation,
        "How can I put several plots on one page in R, as a grid with 2 rows and 3 columns?",
        f"{GRID} [1]",
        citations=[_cited(grid)],
        retrieved=[_found(chunk) for chunk in plots.chunks.order_by("index")],
    )
    return {"conversation": conversation, "plots": plots, "routes": routes, "data": data,
            "note": note, "user": alice}  # fmt: skip


def _ask(conversation, question):
    _, pending = services.message_ask(conversation=conversation, content=question)
    events = []
    answer = generate(pending.pk, lambda event, data: events.append((event, data)))
    assert answer is not None
    asked = answer.reply_to
    assert asked is not None
    asked.refresh_from_db()
    return answer, asked, events


# --- Offline: the conversation as evidence


@pytest.mark.django_db
def test_a_follow_up_without_any_shared_word_finds_the_previous_answers_passage(thread):
    """The follow-up shares no word with the passage it needs (the sibling setting), and its
    own words lead to the travel document; read with the turn before, its search finds the
    passage. Nothing is rewritten: the question is searched as asked."""
    question = VAGUE
    answer, asked, events = _ask(thread["conversation"], question)
    assert asked.is_follow_up
    assert asked.search_query == question
    assert asked.anchors == [thread["plots"].pk]
    sibling = thread["plots"].chunks.get(content=SIBLING)
    found = [r["id"] for r in answer.retrieved if r["kind"] == "document"]
    assert sibling.pk in found[:2]
    assert answer.retrieved[0]["attachment_id"] == thread["plots"].pk
    [(_, searched)] = [e for e in events if e[0] == "searched"]
    assert (searched["query"], searched["is_follow_up"], searched["rewritten"]) == (
        question, True, False,
    )  # fmt: skip
    assert answer.tool_calls[0]["arguments"]["query"] == question


@pytest.mark.django_db
def test_the_same_question_alone_does_not_find_it(thread, settings):
    """The control for the test above: searched without the conversation, the vague words
    find the travel document first."""
    settings.CHAT_REFORMULATION = "off"
    question = VAGUE
    answer, asked, _ = _ask(thread["conversation"], question)
    assert not asked.is_follow_up
    assert answer.retrieved[0]["attachment_id"] == thread["routes"].pk


@pytest.mark.django_db
def test_a_question_that_finds_strong_passages_elsewhere_is_not_anchored_to_the_previous_one(
    thread,
):
    """It opens like a follow-up ("What about …"), and no announcement ("switching topics") is
    needed: the question alone finds a passage closer to it than anything the conversation
    brings, so it is searched alone, without anchors."""
    question = "What about reading netCDF or HDF5 data files into R?"
    answer, asked, events = _ask(thread["conversation"], question)
    assert not asked.is_follow_up
    assert asked.anchors == []
    assert answer.retrieved[0]["attachment_id"] == thread["data"].pk
    [(_, searched)] = [e for e in events if e[0] == "searched"]
    assert searched["is_follow_up"] is False


@pytest.mark.django_db
def test_a_follow_up_is_read_with_the_turn_before(thread):
    asked = Message.objects.create(conversation=thread["conversation"], role="user",
                                   content="And what about by column?")  # fmt: skip
    found = reformulate(asked)
    assert (found.query, found.is_follow_up, found.by) == ("And what about by column?", True,
                                                           "offline")  # fmt: skip
    assert not found.needs_reformulation  # offline, nothing is rewritten
    assert found.anchors == [thread["plots"].pk]
    grid = thread["plots"].chunks.get(content=GRID)
    assert found.pages == [(thread["plots"].pk, grid.page_number)]
    assert found.context_vector is not None
    assert "several plots on one page" in found.context_text
    assert "mfrow" in found.context_text  # what the answer said, without its markers
    assert "[1]" not in found.context_text
    assert len(found.seen) == 2  # offline, the turn before is all that counts


@pytest.mark.django_db
def test_the_first_question_of_a_conversation_is_searched_alone(alice):
    notebook = NotebookFactory.create(owner=alice)
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    asked = Message.objects.create(conversation=conversation, role="user", content="And it?")
    found = reformulate(asked)
    assert (found.query, found.is_follow_up, found.anchors, found.context_vector) == (
        "And it?", False, [], None,
    )  # fmt: skip


@pytest.mark.django_db
def test_reformulation_off_searches_the_question_as_asked(thread, settings):
    settings.CHAT_REFORMULATION = "off"
    asked = Message.objects.create(
        conversation=thread["conversation"], role="user", content="And what about it?"
    )
    found = reformulate(asked)
    assert (found.query, found.is_follow_up, found.by) == ("And what about it?", False, "none")


@pytest.mark.django_db
def test_an_abstention_lends_the_context_no_words(thread):
    """An answer that cited nothing says nothing about the topic: the context keeps the
    question and the passages its search found, not the abstention's words."""
    conversation = thread["conversation"]
    sibling = thread["plots"].chunks.get(content=SIBLING)
    _turn(conversation, "Which one fills by column?",
          "The sources don't seem to contain an answer to this question.",
          retrieved=[_found(sibling)])  # fmt: skip
    found = in_context("And the size of the labels?", list(conversation.messages.order_by("-pk")))
    assert found.context_text == "Which one fills by column?"
    assert found.context_vector is not None


@pytest.mark.django_db
def test_an_answer_that_cited_nothing_anchors_its_best_document_and_pages(thread):
    """An abstained answer has no evidence: the best passage it retrieved stands for it (its
    document and its best pages there); the runner-up document is as likely noise."""
    conversation = thread["conversation"]
    best, other = thread["plots"].pk, thread["routes"].pk
    asked = Message.objects.create(conversation=conversation, role="user", content="Why?")
    Message.objects.create(
        conversation=conversation, role="assistant", reply_to=asked,
        content="The sources don't seem to contain an answer to this question.",
        retrieved=[{"kind": "document", "attachment_id": a, "page": p}
                   for a, p in ((best, 43), (other, 17), (best, 84), (best, 42))],
    )  # fmt: skip
    found = in_context("And across several columns?", list(conversation.messages.order_by("-pk")))
    assert found.anchors == [best]
    assert found.pages == [(best, 43), (best, 84)]


# --- With a chat model: the rewrite, and every way it can fail


@pytest.fixture
def fake(settings):
    with fake_chat_server("friendly") as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        yield server


@pytest.mark.django_db
def test_the_model_rewrites_a_follow_up_as_json(thread, fake):
    fake.reformulation_script = [
        Metadata(
            {
                "needs_reformulation": True,
                "is_follow_up": True,
                "query": "What is the difference between mfrow and mfcol?",
            }
        )
    ]
    asked = Message.objects.create(
        conversation=thread["conversation"], role="user", content="Isn't there an alternative?"
    )
    found = reformulate(asked)
    assert found.by == "llm"
    assert found.query == "What is the difference between mfrow and mfcol?"
    assert found.anchors == [thread["plots"].pk]
    assert found.context_vector is None  # the rewrite names what it means
    [request] = fake.reformulation_requests
    transcript = request["messages"][1]["content"]
    assert "several plots on one page" in transcript
    assert "Isn't there an alternative?" in transcript


@pytest.mark.django_db
def test_the_model_sees_earlier_relevant_messages_besides_the_last_two(thread, fake):
    conversation = thread["conversation"]
    for i in range(4):
        _turn(conversation, f"What does option number {i} of sink do?", f"Option {i} diverts.")
    asked = Message.objects.create(
        conversation=conversation, role="user", content="And the grid of plots with mfrow?"
    )
    found = reformulate(asked)
    first = Message.objects.filter(conversation=conversation).order_by("pk")[0]
    assert first.pk in found.seen  # relevant, though ten messages back
    assert len(found.seen) <= 7
    assert found.seen == sorted(found.seen, reverse=True)  # most recent first
    assert Message.objects.filter(conversation=conversation).exclude(embedding=None).exists()


@pytest.mark.django_db
def test_the_model_saying_not_a_follow_up_is_not_anchored(thread, fake):
    fake.reformulation_script = [
        Metadata({"needs_reformulation": False, "is_follow_up": False, "query": "netCDF in R"})
    ]
    question = "How can I read netCDF files into R?"
    asked = Message.objects.create(conversation=thread["conversation"], role="user",
                                   content=question)  # fmt: skip
    found = reformulate(asked)
    assert (found.query, found.is_follow_up, found.anchors, found.by) == (
        question, False, [], "llm",
    )  # fmt: skip


@pytest.mark.parametrize(
    "turn",
    [
        Metadata("Sure! The question is about mfcol."),  # prose, no JSON
        Metadata('{"needs_reformulation": true, "is_follow_up": tru'),  # invalid JSON
        Metadata({"query": 42}),  # JSON of the wrong shape
        Refusal(),
        Status(429),
        Status(503),
        Hang(30),
    ],
    ids=["junk", "invalid-json", "wrong-shape", "refusal", "429", "503", "hang"],
)
@pytest.mark.django_db
def test_a_failed_rewrite_falls_back_to_reading_the_question_in_context(
    thread, fake, settings, turn
):
    settings.CHAT_TIMEOUT = 5
    fake.reformulation_script = [turn]
    question = "Isn't there an alternative to it?"
    asked = Message.objects.create(conversation=thread["conversation"], role="user",
                                   content=question)  # fmt: skip
    found = reformulate(asked)
    assert (found.by, found.is_follow_up, found.query) == ("offline", True, question)
    assert found.context_vector is not None
    assert found.anchors == [thread["plots"].pk]


# --- Source anchoring in search


@pytest.mark.django_db
def test_anchoring_lifts_the_previous_answers_document_and_zero_turns_it_off(alice):
    notebook = NotebookFactory.create(owner=alice)
    note = NoteFactory.create(notebook=notebook)
    other = make_attachment(note, ["Labels and points shrink with panels."])
    anchored = make_attachment(note, ["Points and labels shrink with several panels."])
    make_attachment(note, [f"Panels number {i} of a figure." for i in range(6)])
    scope = Scope(notebook_id=notebook.pk)
    query = "labels points shrink panels"
    plain = search(user=alice, query=query, scope=scope, limit=2, mode="lexical")
    assert _attachment(plain.hits[0]).pk == other.pk
    lifted = search(user=alice, query=query, scope=scope, limit=2, mode="lexical",
                    anchors=[anchored.pk])  # fmt: skip
    assert _attachment(lifted.hits[0]).pk == anchored.pk
    assert lifted.info["anchors"] == {"attachment_ids": [anchored.pk], "boost": 0.2}
    off = search(user=alice, query=query, scope=scope, limit=2, mode="lexical",
                 anchors=[anchored.pk], anchor_boost=0)  # fmt: skip
    assert _attachment(off.hits[0]).pk == other.pk


@pytest.mark.django_db
def test_a_passage_far_ahead_by_its_own_words_keeps_its_lead_over_the_anchor_boost(alice):
    """The boost is weighed against how far ahead the best passage is, not against its rank:
    a passage holding every rare word of the question stays first, while the anchored
    document's passages, which share one common word with it, stay behind."""
    notebook = NotebookFactory.create(owner=alice)
    note = NoteFactory.create(notebook=notebook)
    strong = make_attachment(note, ["netcdf hdf5 ncdf4 binary files", "A page about colours."])
    anchored = make_attachment(note, [f"Chapter {i} lists the files of a project." for i in
                                      range(12)])  # fmt: skip
    found = search(user=alice, query="netcdf hdf5 ncdf4 binary files", mode="lexical", limit=3,
                   scope=Scope(notebook_id=notebook.pk), anchors=[anchored.pk])  # fmt: skip
    assert _attachment(found.hits[0]).pk == strong.pk


@pytest.mark.django_db
def test_the_pages_beside_the_cited_ones_are_lifted_too(alice, settings):
    """A follow-up often moves to the next page: the page boost reaches the cited page's
    neighbours (SEARCH_ANCHOR_PAGE_WINDOW), not the pages further away (9 and 1)."""
    notebook = NotebookFactory.create(owner=alice)
    document = make_attachment(NoteFactory.create(notebook=notebook), [
        "Points and labels shrink with panels.", "Points and labels shrink with panels!",
        "Points labels shrink in panels of a figure.", "A page about colours.",
    ])  # fmt: skip
    for chunk, page in zip(document.chunks.order_by("index"), (9, 1, 5, 4), strict=True):
        chunk.page_number = page
        chunk.save()
    settings.SEARCH_ANCHOR_PAGE_BOOST = 1.5  # more than any normalised score difference

    def best(window):
        settings.SEARCH_ANCHOR_PAGE_WINDOW = window
        found = search(user=alice, query="points labels shrink panels", mode="lexical",
                       limit=1, anchors=[document.pk], anchor_pages=[(document.pk, 4)])  # fmt: skip
        chunk = found.hits[0].chunk
        assert chunk is not None
        return chunk.page_number

    assert best(0) != 5  # the cited page 4 itself does not match; 5 is not lifted
    assert best(1) == 5  # next to the cited page


@pytest.mark.django_db
def test_anchors_and_context_never_widen_the_scope(alice, bob):
    mine = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    bobs = _document(NoteFactory.create(notebook=NotebookFactory.create(owner=bob)),
                     ["panels shrink labels zqxjcanary"])  # fmt: skip
    _document(mine, ["panels of figures"])
    context = list(bobs.chunks.get().vectors.get().embedding)
    found = search(user=alice, query="panels shrink labels zqxjcanary", limit=5,
                   anchors=[bobs.pk], context_vector=context,
                   context_text="panels shrink labels zqxjcanary")  # fmt: skip
    assert found.hits
    assert all(hit.note.notebook.owner_id == alice.pk for hit in found.hits)


# --- What the page and the API show


def _page(client, conversation):
    return client.get(f"/chats/{conversation.pk}/").content.decode()


@pytest.mark.django_db
def test_offline_no_searched_for_line_is_shown_only_that_the_question_was_read_in_context(
    thread, client
):
    question = "And what about by column?"
    _, asked, _ = _ask(thread["conversation"], question)
    assert asked.is_follow_up
    assert asked.search_query == question
    client.force_login(thread["user"])
    page = _page(client, thread["conversation"])
    assert 'data-testid="searched-for"' not in page
    assert "Searched for:" not in page
    assert 'data-testid="read-in-context"' in page
    assert "Read with the earlier questions." in page
    api = client.get(f"/api/conversations/{thread['conversation'].pk}/messages").json()["items"]
    shown = next(m for m in api if m["id"] == asked.pk)
    assert (shown["search_query"], shown["is_follow_up"]) == (question, True)
    assert shown["anchors"] == [thread["plots"].pk]


@pytest.mark.django_db
def test_a_rewrite_by_the_chat_model_is_shown_as_what_was_searched(thread, client):
    conversation = thread["conversation"]
    asked = _turn(conversation, "Isn't there an alternative?", "mfcol [1].")
    Message.objects.filter(pk=asked.pk).update(
        is_follow_up=True, search_query="What is the difference between mfrow and mfcol?"
    )
    client.force_login(thread["user"])
    page = _page(client, conversation)
    assert 'data-testid="searched-for"' in page
    assert "Read as a follow-up. Searched for:" in page
    assert "What is the difference between mfrow and mfcol?" in page
    assert 'data-testid="read-in-context"' not in page
