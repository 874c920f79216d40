"""Follow-ups that keep the thread: the offline rules, the model's rewrite and its fallbacks,
source anchoring in search, and the whole path over a really ingested PDF."""

from __future__ import annotations

import pytest

from chat import services
from chat.agent import generate
from chat.models import Message
from chat.reformulation import looks_like_follow_up, offline, reformulate
from notes.services import note_create
from search.retrieval import Scope, search
from tests.attachments.test_pipeline import ingest
from tests.conftest import upload
from tests.factories import NotebookFactory, NoteFactory
from tests.fake_chat import Hang, Metadata, Refusal, Status, fake_chat_server
from tests.search.test_retrieval import make_attachment

FOLLOW_UPS = [
    "Isn't there a near-identical alternative to it? What changes if I use that one instead?",
    "And if I don't have the program itself?",
    "What about setup on Linux, is anything extra needed?",
    "Which function does the reverse of that?",
    "Do they end up giving about the same answer?",
    "Was hat es ohne Nacharbeit alles falsch gemacht?",
    "Und wie wurde das damals technisch gemacht?",
    "Hva med Linux?",
    "那要放在页面侧边的注释呢？",
    "能具体说说它的参数怎么用吗？",
    "Why?",
    "Kann ich die auch links und rechts ein Stück kürzen?",
]
SELF_CONTAINED = [
    "Switching topics: how can I read netCDF or HDF5 data files into R?",
    "Unrelated question: how do I list the files in a directory from within R?",
    "Andere Frage: Wie gruppiert LilyPond die Engraver für einzelne Stimmen?",
    "另外问一下：在文章里引用一小段别人的话，用什么环境比较合适？",
    "How can I formally test in R whether a sample looks normally distributed?",
    "With url.sty, how do I define my own \\email command that prints addresses in roman?",
    "Is it possible to read an Excel spreadsheet into R without Excel installed?",
    "Switching to R: which environment variable decides where R puts its temporary directory?",
    "Moving on to tables: how do I merge two cells?",
    "Changing the subject, how do I colour a word red in LaTeX?",
    "Wie setze ich die Linie unter dem Tabellenkopf mit booktabs?",
    "Kann ich die Linien auch links und rechts kürzen?",
    "Gibt es bei booktabs einen Befehl, der auch farbige Linien zeichnen kann?",
]


@pytest.mark.parametrize("question", FOLLOW_UPS)
def test_follow_ups_are_recognised_in_every_indexed_language(question):
    assert looks_like_follow_up(question)


@pytest.mark.parametrize("question", SELF_CONTAINED)
def test_self_contained_questions_and_topic_switches_are_not_follow_ups(question):
    assert not looks_like_follow_up(question)


def _turn(conversation, question, answer, *, citations=None, search_query=""):
    asked = Message.objects.create(
        conversation=conversation, role="user", content=question, search_query=search_query
    )
    Message.objects.create(
        conversation=conversation, role="assistant", content=answer, reply_to=asked,
        citations=citations or [],
    )  # fmt: skip
    return asked


@pytest.fixture
def thread(alice):
    notebook = NotebookFactory.create(owner=alice)
    note = NoteFactory.create(notebook=notebook)
    plots = make_attachment(note, ["mfrow and mfcol arrange several figures on one page."])
    chunk = plots.chunks.get()
    chunk.heading_path = ["12 Graphical procedures", "12.5.3 Multiple figure environment"]
    chunk.save()
    conversation = services.conversation_create(owner=alice, notebook=notebook, note=note)
    _turn(
        conversation,
        "How can I put several plots on one page in R, as a grid with 2 rows?",
        "Set par(mfrow=c(2,3)) to fill a 2 by 3 grid row by row [1].",
        citations=[
            {
                "n": 1,
                "kind": "document",
                "attachment_id": plots.pk,
                "chunk_id": chunk.pk,
                "page": 1,
                "quote": "mfrow",
            }
        ],
    )
    return {"conversation": conversation, "attachment": plots, "note": note}


@pytest.mark.django_db
def test_a_follow_up_is_completed_from_the_previous_turn_and_anchored(thread):
    conversation = thread["conversation"]
    asked = Message.objects.create(
        conversation=conversation, role="user", content="Isn't there an alternative to it?"
    )
    found = reformulate(asked)
    assert found.is_follow_up
    assert found.needs_reformulation
    assert found.by == "offline"
    assert found.query.startswith("Isn't there an alternative to it?")
    # ("page" of the question is an English stop word in stopwords-iso: left out.)
    for word in ("plots", "grid", "mfrow", "Multiple figure environment"):
        assert word in found.query
    assert found.anchors == [thread["attachment"].pk]
    assert len(found.seen) == 2  # the last two messages


@pytest.mark.django_db
def test_a_self_contained_question_passes_unchanged_without_anchors(thread):
    question = "Switching topics: how can I read netCDF files into R?"
    asked = Message.objects.create(
        conversation=thread["conversation"], role="user", content=question
    )
    found = reformulate(asked)
    assert (found.query, found.is_follow_up, found.anchors) == (question, False, [])


@pytest.mark.django_db
def test_earlier_relevant_messages_are_seen_besides_the_last_two(thread):
    conversation = thread["conversation"]
    for i in range(4):
        _turn(conversation, f"What does option number {i} of sink do?", f"Option {i} diverts.")
    asked = Message.objects.create(
        conversation=conversation, role="user", content="And the grid of plots with mfrow?"
    )
    found = reformulate(asked)
    first = Message.objects.filter(conversation=conversation).order_by("pk")[0]
    assert first.pk in found.seen  # relevant, though six messages back
    assert len(found.seen) <= 7
    assert found.seen == sorted(found.seen, reverse=True)  # most recent first
    assert Message.objects.filter(conversation=conversation).exclude(embedding=None).exists()


@pytest.mark.django_db
def test_reformulation_off_searches_the_question_as_asked(thread, settings):
    settings.CHAT_REFORMULATION = "off"
    asked = Message.objects.create(
        conversation=thread["conversation"], role="user", content="And what about it?"
    )
    found = reformulate(asked)
    assert (found.query, found.is_follow_up, found.by) == ("And what about it?", False, "none")


@pytest.mark.django_db
def test_offline_completion_uses_the_previous_search_of_a_follow_up_chain(thread):
    conversation = thread["conversation"]
    _turn(conversation, "And by column?", "mfcol fills by column [1].",
          search_query="And by column? several plots page grid mfrow")  # fmt: skip
    context = list(conversation.messages.order_by("-pk"))
    found = offline("What about the size of the labels then?", context)
    assert found.is_follow_up
    assert "mfrow" in found.query
    assert "column" in found.query


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
    assert found.anchors == [thread["attachment"].pk]
    [request] = fake.reformulation_requests
    transcript = request["messages"][1]["content"]
    assert "several plots on one page" in transcript
    assert "Isn't there an alternative?" in transcript


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
def test_a_failed_rewrite_falls_back_to_the_offline_rules(thread, fake, settings, turn):
    settings.CHAT_TIMEOUT = 5
    fake.reformulation_script = [turn]
    asked = Message.objects.create(
        conversation=thread["conversation"],
        role="user",
        content="Isn't there an alternative to it?",
    )
    found = reformulate(asked)
    assert found.by == "offline"
    assert found.is_follow_up
    assert "mfrow" in found.query


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
    assert plain.hits[0].attachment.pk == other.pk
    lifted = search(user=alice, query=query, scope=scope, limit=2, mode="lexical",
                    anchors=[anchored.pk])  # fmt: skip
    assert lifted.hits[0].attachment.pk == anchored.pk
    assert lifted.info["anchors"] == {"attachment_ids": [anchored.pk], "boost": 0.3}
    off = search(user=alice, query=query, scope=scope, limit=2, mode="lexical",
                 anchors=[anchored.pk], anchor_boost=0)  # fmt: skip
    assert off.hits[0].attachment.pk == other.pk


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
        return found.hits[0].chunk.page_number

    assert best(0) != 5  # the cited page 4 itself does not match; 5 is not lifted
    assert best(1) == 5  # next to the cited page


@pytest.mark.django_db
def test_an_answer_that_cited_nothing_anchors_its_best_document_and_pages(thread):
    """An abstained answer has no evidence: the best passage it retrieved stands for it (its
    document and its best pages there); the runner-up document is as likely noise."""
    conversation = thread["conversation"]
    best, other = thread["attachment"].pk, thread["attachment"].pk + 1000
    asked = Message.objects.create(conversation=conversation, role="user", content="Why?")
    Message.objects.create(
        conversation=conversation, role="assistant", reply_to=asked,
        content="The sources don't seem to contain an answer to this question.",
        retrieved=[{"kind": "document", "attachment_id": a, "page": p}
                   for a, p in ((best, 43), (other, 17), (best, 84), (best, 42))],
    )  # fmt: skip
    found = offline("And across several columns?", list(conversation.messages.order_by("-pk")))
    assert found.anchors == [best]
    assert found.pages == [(best, 43), (best, 84)]


@pytest.mark.django_db
def test_anchors_never_widen_the_scope(alice, bob):
    mine = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    bobs = make_attachment(NoteFactory.create(notebook=NotebookFactory.create(owner=bob)),
                           ["panels shrink labels zqxjcanary"])  # fmt: skip
    make_attachment(mine, ["panels of figures"])
    found = search(user=alice, query="panels shrink labels zqxjcanary", limit=5,
                   anchors=[bobs.pk])  # fmt: skip
    assert all(hit.note.notebook.owner_id == alice.pk for hit in found.hits)


# --- The whole path, offline, over a real PDF


@pytest.mark.django_db
def test_a_follow_up_is_searched_in_context_and_shown(alice, client):
    notebook = NotebookFactory.create(owner=alice, title="TeX")
    note = note_create(notebook=notebook, author=alice, title="URLs")
    attachment = ingest(upload(alice, note, "url.pdf"))
    conversation = services.conversation_create(owner=alice, notebook=notebook, note=note)

    def ask(question):
        _, pending = services.message_ask(conversation=conversation, content=question)
        events = []
        answer = generate(pending.pk, lambda event, data: events.append((event, data)))
        return answer, events

    first, _ = ask("With the url package, how can I print web addresses in the same font as "
                   "the surrounding text instead of typewriter?")  # fmt: skip
    assert first.citations
    follow, events = ask("Will that also make them clickable in the PDF?")
    asked = follow.reply_to
    asked.refresh_from_db()
    assert asked.is_follow_up
    assert asked.anchors == [attachment.pk]
    assert asked.search_query.startswith("Will that also make them clickable in the PDF?")
    assert "url" in asked.search_query.lower()
    [(_, searched)] = [e for e in events if e[0] == "searched"]
    assert searched["query"] == asked.search_query
    assert searched["is_follow_up"] is True
    assert follow.tool_calls[0]["arguments"]["query"] == asked.search_query

    client.force_login(alice)
    page = client.get(f"/chats/{conversation.pk}/").content.decode()
    assert 'data-testid="searched-for"' in page
    assert "Searched for:" in page
    api = client.get(f"/api/conversations/{conversation.pk}/messages").json()["items"]
    question = next(m for m in api if m["id"] == asked.pk)
    assert question["search_query"] == asked.search_query
    assert question["is_follow_up"] is True
    assert question["anchors"] == [attachment.pk]
