"""A canary in Bob's sources never reaches Alice, whatever she (or a model answering her) runs.

Bob has a PDF (the sample other.pdf, about bread, as "sourdough.pdf", ingested by the real
pipeline) and a note; a canary string is planted in a page and a chunk of his PDF (re-indexed and
re-embedded through the pipeline's own functions) and in his note. Alice has her own PDF (the
sample text.pdf, about herons, kingfishers and otters) and note. As Alice we then run
everything that could carry text or counts across: the search page and /api/search in every
mode, with the canary's words and with words of Bob's PDF; each chat tool with Bob's ids; whole
answers through chat.agent.generate with the extractive answerer and with a chat model (a local
fake server speaking OpenAI's protocol) that asks for Bob's ids and the canary; follow-ups;
and the counts pages show (notebook list, "N results", filter lists, PDFs being processed).

Alice types the canary's words, never the canary itself (`zqxj-canary-plover` is one token to
Postgres and a string to us): where it shows up, it came from Bob. A model's tool arguments
echo what it asked for, so those are the one place the canary may appear.
"""

from __future__ import annotations

import io
import json
import re
from html import escape
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django_q.models import OrmQ, Schedule

from attachments.models import DocumentChunk, NoteAttachment
from attachments.services.ingestion import attachment_reembed, index_text
from chat import services
from chat.agent import generate
from chat.memory import memories_for_prompt
from chat.models import Memory, Message
from chat.tools import AnswerRequest, tools_for
from notes import indexing
from notes.models import Note
from notes.services import note_create, notebook_create
from search.documents import search_documents
from search.retrieval import Mode, Scope, search
from tests.factories import UserFactory
from tests.fake_chat import Answer, FakeChat, Metadata, ToolCall, fake_chat_server, sources_in
from tests.fixtures.documents import SAMPLES, ingest, upload

pytestmark = pytest.mark.django_db
CANARY = "zqxj-canary-plover"
CANARY_WORDS = "zqxj canary plover"  # what Alice types
BOB_SENTENCE = f"The vault combination is {CANARY}, said Bob."
BOB_WORDS = "sourdough starter feeding dough loaf oven"  # words of Bob's PDF, not in BOB_ONLY
MODES: tuple[Mode, ...] = ("lexical", "vector", "hybrid")
QUERIES = (CANARY, CANARY_WORDS, BOB_WORDS, "what is the vault combination")
# Anywhere in a response these can only have come from Bob's sources.
BOB_PDF = "sourdough.pdf"  # other.pdf under a name of its own (file names are shown)
BOB_ONLY = (CANARY, BOB_PDF, "Bob's", "rye flour", "cast iron pot")


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory):
    """Built once for the module and committed (ingesting two PDFs takes a while); each
    test runs in a transaction on top of it. The `alice` and `bob` fixtures are these users."""
    media = tmp_path_factory.mktemp("m")
    with django_db_blocker.unblock(), override_settings(MEDIA_ROOT=media):
        queued = set(OrmQ.objects.values_list("pk", flat=True))
        schedules = set(Schedule.objects.values_list("pk", flat=True))
        try:
            world = build_world()
            world.media = media  # where its files are (each test gets a fresh MEDIA_ROOT)
            yield world
        finally:  # committed: leave the database as the next module expects it
            User.objects.filter(username__in=["alice", "bob"]).delete()
            OrmQ.objects.exclude(pk__in=queued).delete()  # the tasks our commits queued
            Schedule.objects.exclude(pk__in=schedules).delete()  # and the delayed ones


def build_world() -> SimpleNamespace:
    alice, bob = UserFactory.create(username="alice"), UserFactory.create(username="bob")
    bobs_book = notebook_create(owner=bob, title="Bob's secrets")
    bobs_note = note_create(
        notebook=bobs_book, author=bob, title="Bob's plans", body=f"{BOB_SENTENCE} sourdough."
    )
    indexing.note_embed(note_id=bobs_note.pk)
    bobs_pdf = ingest(upload(bob, bobs_note, BOB_PDF, (SAMPLES / "other.pdf").read_bytes()))
    assert bobs_pdf.status == "ready", bobs_pdf.error
    planted = plant(bobs_pdf)
    Memory.objects.create(  # and in what his chats remember
        owner=bob, notebook=bobs_book, kind="fact", text=BOB_SENTENCE, importance=1.0
    )
    waiting = upload(bob, bobs_note, "long.pdf")  # still pending: never counted for Alice
    assert waiting.status == "pending"

    book = notebook_create(owner=alice, title="Alice's library")
    note = note_create(
        notebook=book, author=alice, title="Millpond wildlife",
        body="Reading notes on the survey: where the herons, kingfishers and otters are seen.",
    )  # fmt: skip
    indexing.note_embed(note_id=note.pk)
    mine = ingest(upload(alice, note, "text.pdf"))
    assert mine.status == "ready", mine.error
    world = SimpleNamespace(
        alice=alice, bob=bob, book=book, note=note, pdf=mine,
        bobs_book=bobs_book, bobs_note=bobs_note, bobs_pdf=bobs_pdf, planted=planted,
    )  # fmt: skip
    bob_finds_his_canary(world)
    return world


def plant(attachment: NoteAttachment) -> DocumentChunk:
    """Put the canary sentence at the end of the PDF's last chunk and into its page, then
    index and embed that chunk again with the pipeline's functions."""
    chunk = attachment.chunks.order_by("-index").first()
    assert chunk is not None
    page = attachment.pages.get(number=chunk.page_number)
    added = f" {BOB_SENTENCE}"
    page.text = page.text[: chunk.end_char] + added + page.text[chunk.end_char :]
    page.save(update_fields=["text"])
    chunk.content += added
    chunk.end_char += len(added)
    chunk.char_count = len(chunk.content)
    chunk.embedding_model = ""  # so that re-embedding takes it
    chunk.save(update_fields=["content", "end_char", "char_count", "embedding_model"])
    index_text(attachment, attachment.language, attachment.search_config)
    attachment_reembed(attachment_id=attachment.pk)
    attachment.refresh_from_db()
    assert attachment.status == "ready", attachment.error
    chunk.refresh_from_db()
    assert chunk.embedding_model
    assert chunk.vectors.exists()
    return chunk


def bob_finds_his_canary(world: SimpleNamespace) -> None:
    """The control: the canary is findable, in every mode, by its owner."""
    for mode in MODES:
        query = BOB_SENTENCE if mode == "vector" else CANARY_WORDS
        hits = search(user=world.bob, query=query, mode=mode, limit=20).hits
        found = {(hit.kind, hit.chunk.pk if hit.chunk else hit.note.pk) for hit in hits}
        assert ("document", world.planted.pk) in found, mode
        assert ("note", world.bobs_note.pk) in found, mode


def assert_nothing_of_bobs(text: str, where: str) -> None:
    for marker in BOB_ONLY:
        for form in (marker, escape(marker), json.dumps(marker)[1:-1]):
            assert form not in text, f"{marker!r} reached Alice in {where}"


def results_part(page: str, query: str = "") -> str:
    """The search page from its summary on (above it, the form echoes the query), without the
    summary's own echo of what Alice typed ("No results for “…”")."""
    start = page.find('id="search-summary"')
    part = page[start:] if start >= 0 else ""
    return part.replace(f"“{escape(query)}”", "“”") if query else part


# --- search -----------------------------------------------------------------------------------


def test_search_never_shows_bobs_canary_document_or_counts(
    world, alice_client, alice_api, settings
):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "search": "1000/m"}  # every mode and query
    alices_notes = {world.note.pk}
    for mode in MODES:
        for query in QUERIES:
            for include_notes in (True, False):
                params = {"q": query, "mode": mode, "limit": 20, "include_notes": include_notes}
                got = alice_api.get("/api/search", params)
                posted = alice_api.post("/api/search", json.dumps(params), "application/json")
                for response in (got, posted):
                    assert response.status_code == 200
                    body = response.json()
                    assert {h["note_id"] for h in body["hits"]} <= alices_notes
                    assert {h["notebook_id"] for h in body["hits"]} <= {world.book.pk}
                    assert_nothing_of_bobs(json.dumps(body["hits"]), f"/api/search {params}")
                count = len(got.json()["hits"])
                # sent=1: a submitted form, where an unticked "Include notes" means off.
                form = {"q": query, "mode": mode, "sent": "1",
                        **({"notes": "on"} if include_notes else {})}  # fmt: skip
                for url in ("/search/", f"/notebooks/{world.book.pk}/search/"):
                    page = alice_client.get(url, form).content.decode()
                    assert_nothing_of_bobs(results_part(page, query), f"{url} {form}")
                    for marker in ("Bob's", BOB_PDF):  # filters list names, too
                        assert escape(marker) not in page
                    assert "still being processed" not in page  # Bob's pending PDF
                    shown = re.search(r'id="search-summary">(\d+) results? for', page)
                    if count == 0:  # the summary then says so in words
                        assert shown is None
                        assert 'id="search-summary">No results for' in page, (url, form)
                    else:
                        assert shown is not None, (url, form)
                        assert int(shown.group(1)) == count, (url, form)


def profile_of(attachment: NoteAttachment, name: str, extracted: dict[str, str]) -> None:
    """A ready document profile (search in any language) with its canonical text embedded."""
    from core.embeddings import get_embedder
    from intelligence.models import SourceProfile

    canonical = f"{name}\nreceipt\n{json.dumps(extracted)}"
    (embedding,) = get_embedder().embed([canonical])
    SourceProfile.objects.update_or_create(
        attachment=attachment,
        defaults={"doc_type": "receipt", "confidence": 0.9, "better_name": name,
                  "extracted": extracted,
                  "canonical_text": canonical, "embedding": embedding, "status": "ready",
                  "method": "offline"},
    )  # fmt: skip


def test_document_search_never_shows_bobs_sources(world, alice_client, alice_api):
    """The whole-documents mode over document vectors, and the doc-type filter, in every
    combination: Bob's profile (the canary in its name and data, its vector closest to every
    query) never reaches Alice; Bob himself finds it (the control)."""
    profile_of(world.bobs_pdf, f"Bob's {CANARY} receipt", {"secret": BOB_SENTENCE})
    profile_of(world.pdf, "Millpond wildlife survey", {"topic": "herons"})
    bobs = search_documents(user=world.bob, query=BOB_SENTENCE, limit=5).documents
    assert world.bobs_pdf.pk in [d.attachment.pk for d in bobs]
    for query in (*QUERIES, BOB_SENTENCE, f"Bob's {CANARY} receipt"):
        for doc_type in ("", "receipt"):
            params = {"q": query, "mode": "documents", "limit": 20, "doc_type": doc_type or None}
            params = {k: v for k, v in params.items() if v is not None}
            for response in (
                alice_api.get("/api/search", params),
                alice_api.post("/api/search", json.dumps(params), "application/json"),
            ):
                assert response.status_code == 200
                body = response.json()
                assert {d["attachment_id"] for d in body["documents"]} <= {world.pdf.pk}
                assert_nothing_of_bobs(json.dumps(body["documents"]), f"/api/search {params}")
            form = {"q": query, "mode": "documents", "sent": "1", "type": doc_type}
            for url in ("/search/", f"/notebooks/{world.book.pk}/search/"):
                page = alice_client.get(url, form).content.decode()
                assert_nothing_of_bobs(results_part(page, query), f"{url} {form}")


def test_pages_and_lists_count_only_alices_things(world, alice_client, alice_api):
    listing = alice_client.get("/").content.decode()
    assert escape("Alice's library") in listing
    assert "Bob" not in listing
    assert re.findall(r"(\d+) notes?\b", listing) == ["1"]
    filters = alice_client.get("/search/").content.decode()  # the filter lists, no query
    assert escape("Alice's library") in filters
    assert "text.pdf (Millpond wildlife)" in filters
    for marker in ("Bob", BOB_PDF, "still being processed"):
        assert marker not in filters
    assert alice_api.get("/api/notebooks").json()["count"] == 1
    assert alice_api.get(f"/api/notebooks/{world.book.pk}/notes").json()["count"] == 1
    assert alice_api.get("/api/conversations").json()["count"] == 0
    detail = alice_client.get(f"/notebooks/{world.book.pk}/").content.decode()
    assert "Bob" not in detail


# --- the composer's @ / @@ suggestions ----------------------------------------------------------


def test_mention_suggestions_offer_only_alices_sources_and_counts(world, alice_client, alice_api):
    terms = ("", "b", "bob", "plans", "secrets", "sour", "text", "vault", CANARY_WORDS, BOB_WORDS)
    for term in terms:
        for everything in (False, True):
            page = alice_client.get(
                "/chats/mentions/",
                {"notebook": world.book.pk, "q": term, "all": "1" if everything else "0"},
            )
            api = alice_api.get(
                f"/api/notebooks/{world.book.pk}/mentions", {"q": term, "all": everything}
            )
            for response, results in ((page, page.json()["results"]), (api, api.json())):
                assert response.status_code == 200
                where = f"mentions q={term!r} all={everything}"
                assert_nothing_of_bobs(json.dumps(results), where)
                assert "Bob" not in json.dumps(results), where
                refs = {r["ref"] for r in results}
                assert refs <= {f"note:{world.note.pk}", f"attachment:{world.pdf.pk}",
                                f"notebook:{world.book.pk}"}, where  # fmt: skip
                for folder in (r for r in results if r["kind"] == "folder"):
                    assert folder["count"] == 2, where  # her note and her ready PDF


# --- chat: tools and the extractive answerer ---------------------------------------------------


def tool_arguments(world: SimpleNamespace, name: str) -> list[dict[str, Any]]:
    """What a model could try: Bob's note, the canary, words of Bob's PDF."""
    bobs = world.bobs_note.pk
    return {
        "document_search": [{"query": CANARY, "note_id": bobs}, {"query": CANARY, "limit": 10},
                            {"query": BOB_WORDS, "limit": 10}],
        "note_search": [{"query": CANARY}, {"query": f"{CANARY_WORDS} vault Bob"}],
        "note_read": [{"note_id": bobs}],
    }[name]  # fmt: skip


def test_every_chat_tool_answers_from_alices_sources_only(world):
    contexts = [AnswerRequest(user=world.alice, notebook=world.book),
                AnswerRequest(user=world.alice, notebook=world.book, note=world.note)]  # fmt: skip
    names: set[str] = set()
    for context in contexts:
        for tool in tools_for(context):
            names.add(tool.name)
            for arguments in tool_arguments(world, tool.name):
                result = tool.run(context, arguments)
                assert_nothing_of_bobs(result.content + json.dumps(result.passages), tool.name)
                assert {p["note_id"] for p in result.passages} <= {world.note.pk}
        assert {s["note_id"] for s in context.sources} <= {world.note.pk}
    assert names == {"document_search", "note_search", "note_read"}


def stored(message: Message) -> str:
    """Everything saved on an answer, but the arguments the answerer passed to its tools
    (they echo what it asked for)."""
    calls = [{k: v for k, v in call.items() if k not in ("arguments", "summary")}
             for call in message.tool_calls]  # fmt: skip
    fields = [message.content, message.error, message.citations, message.retrieved, calls,
              message.confidence, message.follow_ups, message.metadata]  # fmt: skip
    return json.dumps(fields)


def ask(conversation, question: str) -> tuple[Message, list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    _, pending = services.message_ask(conversation=conversation, content=question)
    answer = generate(pending.pk, lambda event, data: events.append((event, data)))
    assert answer is not None
    return answer, events


def without_arguments(events: list[tuple[str, dict[str, Any]]]) -> str:
    return json.dumps([(e, {k: v for k, v in d.items() if k not in ("arguments", "summary")})
                       for e, d in events])  # fmt: skip


def assert_conversation_clean(world, conversation, alice_client, alice_api) -> None:
    for message in conversation.messages.filter(role="assistant"):
        assert message.status == "complete", message.error
        assert_nothing_of_bobs(stored(message), f"answer {message.pk}")
        assert {s.get("note_id") for s in message.retrieved} <= {world.note.pk}
        for citation in message.citations:
            assert citation.get("attachment_id") in (None, world.pdf.pk)
            assert citation.get("note_id") in (None, world.note.pk)
    page = alice_client.get(f"/chats/{conversation.pk}/").content.decode()
    assert_nothing_of_bobs(page, "the conversation page")
    api = alice_api.get(f"/api/conversations/{conversation.pk}/messages").json()["items"]
    for item in api:
        item["tool_calls"] = [{k: v for k, v in c.items() if k not in ("arguments", "summary")}
                              for c in item["tool_calls"]]  # fmt: skip
    assert_nothing_of_bobs(json.dumps(api), "the messages API")
    listing = alice_client.get(f"/notebooks/{world.book.pk}/chats/").content.decode()
    assert f"{conversation.messages.count()} messages" in listing
    assert "Bob" not in listing
    # The workspace with this conversation open, and every answer saved to a note.
    workspace = alice_client.get(f"/notebooks/{world.book.pk}/?c={conversation.pk}")
    assert_nothing_of_bobs(workspace.content.decode(), "the workspace")
    state = alice_client.get(f"/notebooks/{world.book.pk}/sources-state/")
    assert_nothing_of_bobs(state.content.decode(), "the workspace's live sources state")
    for message in conversation.messages.filter(role="assistant", status="complete"):
        form = alice_client.get(f"/chats/messages/{message.pk}/save/form/").content.decode()
        assert_nothing_of_bobs(form, "the save form")
        saved = alice_client.post(f"/chats/messages/{message.pk}/save/", HTTP_HX_REQUEST="true")
        # An answer with nothing backed is not saved (chat.saving); it leaks nothing either way.
        unsourced = message.metadata.get("grounding") == "unsourced"
        assert saved.status_code == (400 if unsourced else 200), saved.content
        assert_nothing_of_bobs(saved.content.decode(), "the save response")
    for note in Note.objects.filter(notebook=world.book):
        assert_nothing_of_bobs(note.title + note.body, f"the saved note {note.title!r}")
    notes_pane = alice_client.get(f"/notebooks/{world.book.pk}/notes/").content.decode()
    assert_nothing_of_bobs(notes_pane, "the notes pane")


def test_extractive_answers_and_follow_ups_carry_nothing_of_bobs(world, alice_client, alice_api):
    for note in (None, world.note):
        conversation = services.conversation_create(
            owner=world.alice, notebook=world.book, note=note
        )
        questions = [
            f"What is the {CANARY_WORDS} vault combination someone mentioned?",
            f"How do I use {BOB_WORDS} at home?",
            "Where does the grey heron wait until dusk?",
        ]
        for question in questions:
            answer, events = ask(conversation, question)
            assert_nothing_of_bobs(stored(answer) + without_arguments(events), question)
        # A follow-up the answerer suggested, asked in the same conversation (with history).
        suggested = [q for m in conversation.messages.all() for q in m.follow_ups]
        answer, events = ask(conversation, suggested[0] if suggested else "Tell me more.")
        assert_nothing_of_bobs(stored(answer) + without_arguments(events), "a follow-up")
        assert_conversation_clean(world, conversation, alice_client, alice_api)


# --- chat: a model that asks for Bob's things -------------------------------------------------


@pytest.fixture
def fake(settings):
    with fake_chat_server() as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        yield server


def prying(world: SimpleNamespace, fake: FakeChat):
    """A model that calls every tool with Bob's ids and the canary, then answers with what the
    tools gave it (so anything of Bob's would be in the answer), and suggests follow-ups made
    of the sources it was shown."""
    bobs = world.bobs_note.pk

    def respond(body: dict[str, Any]) -> Any:
        messages = body["messages"]
        if not body.get("stream"):
            shown = sources_in(messages[-1]["content"])
            return Metadata({"confidence": "high", "answerable": True, "citations": [],
                             "follow_ups": [text[:80] for text in shown.values()][:3]
                             or [f"What is {CANARY}?"]})  # fmt: skip
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if not results:
            return [
                ToolCall("document_search", {"query": CANARY, "note_id": bobs}),
                ToolCall("document_search", {"query": f"{BOB_WORDS} {CANARY}", "limit": 10}),
                ToolCall("note_read", {"note_id": bobs}),
                ToolCall("note_search", {"query": CANARY}),
                ToolCall("note_read", {"note_id": bobs, "notebook_id": world.bobs_book.pk}),
            ]
        return Answer("I found: " + " | ".join(results)[:3000])

    return respond


def test_a_model_asking_for_bobs_ids_and_canary_gets_nothing_of_his(
    world, fake, alice_client, alice_api
):
    fake.respond = prying(world, fake)
    conversation = services.conversation_create(owner=world.alice, notebook=world.book)
    # A question Alice's sources answer (so the model writes), with the canary's words in it.
    first, events = ask(conversation, f"Where do the herons nest, and {CANARY_WORDS}?")
    assert first.answerer == "llm"
    assert [call["name"] for call in first.tool_calls] == [
        "document_search", "note_search",  # retrieval before the model writes
        "document_search", "document_search", "note_read", "note_search", "note_read"]  # fmt: skip
    assert_nothing_of_bobs(stored(first) + without_arguments(events), "the model's answer")
    second, events = ask(conversation, first.follow_ups[0])  # a follow-up, with history
    assert_nothing_of_bobs(stored(second) + without_arguments(events), "the follow-up")
    assert_conversation_clean(world, conversation, alice_client, alice_api)
    # Nothing of Bob's was even shown to the model: system prompts, tool results, metadata
    # requests (its own tool calls echo its arguments, so they are left out).
    for body in fake.bodies:
        for message in body["messages"]:
            if message["role"] != "assistant":
                assert_nothing_of_bobs(str(message.get("content")), f"a {message['role']} turn")


def test_retrieval_scoped_to_bobs_notebook_or_note_is_empty_for_alice(world):
    for scope in (Scope(notebook_id=world.bobs_book.pk), Scope(note_id=world.bobs_note.pk),
                  Scope(attachment_ids=[world.bobs_pdf.pk])):  # fmt: skip
        for mode in MODES:
            assert search(user=world.alice, query=CANARY_WORDS, scope=scope, mode=mode).hits == []


# --- memories ---------------------------------------------------------------------------------


def test_bobs_memories_never_reach_alice(world, alice_client, alice_api):
    """Bob's memory holds the canary. Alice's memory panel, page and API, and what her
    answers are given from memory, hold only her own, whatever she asks or names."""
    Memory.objects.create(
        owner=world.alice, notebook=world.book, kind="preference", text="Alice prefers tables."
    )
    for question in QUERIES:
        for book, expected in ((world.book, ["Alice prefers tables."]), (world.bobs_book, [])):
            got = memories_for_prompt(user=world.alice, notebook=book, question=question)
            assert got == expected, (book.title, question)
    for url in (f"/notebooks/{world.book.pk}/", f"/notebooks/{world.book.pk}/memories/",
                f"/notebooks/{world.book.pk}/memories/forget/"):  # fmt: skip
        page = alice_client.get(url).content.decode()
        assert "Alice prefers tables." in page
        assert_nothing_of_bobs(page, url)
    listing = alice_api.get(f"/api/notebooks/{world.book.pk}/memories").json()
    assert [item["text"] for item in listing["items"]] == ["Alice prefers tables."]
    assert alice_api.get(f"/api/notebooks/{world.bobs_book.pk}/memories").status_code == 404
    # The control: Bob's own prompt gets it.
    assert memories_for_prompt(user=world.bob, notebook=world.bobs_book, question=CANARY_WORDS) == [
        BOB_SENTENCE
    ]


# --- chat: summaries of compacted conversations ------------------------------------------------


def test_summaries_of_bobs_conversations_never_reach_alice(world, fake, alice_client, alice_api):
    """Bob's long conversation about his canary is compacted into summaries that carry it;
    Alice's own compacted conversation, its page, the API and what a model answering her
    reads never hold any of it."""
    from chat.compaction import conversation_compact, history_for, summaries_for
    from chat.llm import LLMAnswerer

    fake.summary_script = [Metadata({"summary": f"Bob keeps {CANARY} in the vault."})]
    bobs = services.conversation_create(owner=world.bob, notebook=world.bobs_book)
    mine = services.conversation_create(owner=world.alice, notebook=world.book)
    for conversation, said in ((bobs, BOB_SENTENCE), (mine, "Herons nest in tall alder trees.")):
        for i in range(8):
            question = Message.objects.create(
                conversation=conversation, role="user", content=f"The vault combination, {i}?"
            )
            Message.objects.create(conversation=conversation, role="assistant",
                                   reply_to=question, content=f"{said} [1]")  # fmt: skip
        conversation_compact(conversation=conversation)
    assert CANARY in " ".join(summaries_for(bobs))  # the control
    assert_nothing_of_bobs(" ".join(summaries_for(mine)), "her summaries")

    page = alice_client.get(f"/chats/{mine.pk}/").content.decode()
    assert 'class="summaries"' in page
    assert_nothing_of_bobs(page, "her conversation page")
    for response in (alice_api.get(f"/api/conversations/{mine.pk}/summaries"),
                     alice_api.post(f"/api/conversations/{mine.pk}/compact")):  # fmt: skip
        assert response.status_code == 200
        assert_nothing_of_bobs(response.content.decode(), "the summaries API")
    for response in (alice_api.get(f"/api/conversations/{bobs.pk}/summaries"),
                     alice_api.post(f"/api/conversations/{bobs.pk}/compact"),
                     alice_client.post(f"/chats/{bobs.pk}/compact/")):  # fmt: skip
        assert response.status_code == 404
        assert_nothing_of_bobs(response.content.decode(), "Bob's summaries by id")

    fake.requests.clear()
    _, answer = services.message_ask(conversation=mine, content="Where do herons nest?")
    context = AnswerRequest(user=world.alice, notebook=world.book, conversation=mine,
                            summaries=tuple(summaries_for(mine)))  # fmt: skip
    list(LLMAnswerer().run("Where do herons nest?", history_for(answer), context))
    assert fake.streamed
    for body in fake.bodies:
        for message in body["messages"]:
            assert_nothing_of_bobs(str(message.get("content")), f"a {message['role']} turn")


def test_reformulated_queries_see_only_the_askers_conversation(world, alice_client, alice_api):
    """A follow-up is completed from its own conversation only: Bob's conversation about the
    same subject, full of his canary, is never seen, searched or shown."""
    from chat.models import Message
    from chat.reformulation import reformulate

    bobs = services.conversation_create(owner=world.bob, notebook=world.bobs_book)
    Message.objects.create(conversation=bobs, role="user",
                           content=f"Where do herons nest? Remember {BOB_SENTENCE}")  # fmt: skip
    Message.objects.create(conversation=bobs, role="assistant",
                           content=f"Herons nest at {CANARY} [1].")  # fmt: skip
    conversation = services.conversation_create(
        owner=world.alice, notebook=world.book, note=world.note
    )
    ask(conversation, "Where does the grey heron wait until dusk?")
    answer, events = ask(conversation, "And what about the kingfishers?")
    asked = answer.reply_to
    assert asked is not None
    assert asked.is_follow_up
    assert_nothing_of_bobs(asked.search_query + json.dumps(asked.anchors), "the searched query")
    assert set(asked.anchors) <= {world.pdf.pk}
    assert_nothing_of_bobs(without_arguments(events), "the searched event")
    seen = reformulate(asked).seen
    assert set(seen) <= set(conversation.messages.values_list("pk", flat=True))
    assert_conversation_clean(world, conversation, alice_client, alice_api)


# --- guides -----------------------------------------------------------------------------------


def test_guides_never_carry_anything_of_bobs(world, fake, settings, alice_client, alice_api):
    """Guides written for both (with a chat model that quotes what it is shown): Alice's
    source and notebook guides, their partials and API hold nothing of Bob's, the model was
    shown nothing of his for them, and his guides answer her 404."""
    from guides.models import Guide
    from guides.services import guide_request_notebook, guide_request_source, guide_write

    def quoting(body: dict[str, Any]) -> Any:
        shown = sources_in(body["messages"][-1]["content"])
        summary = [
            {"text": f"It says: {text[:60]}", "citations": [{"n": n, "quote": text[:60]}]}
            for n, text in shown.items()
        ]
        return Metadata(
            {
                "summary": summary,
                "topics": [t[:30] for t in shown.values()],
                "questions": [f"What about {CANARY}?"],
            }
        )

    fake.respond = quoting
    settings.GUIDE_NOTEBOOK_DELAY = 0

    def written(guide: Guide) -> Guide:
        guide_write(guide_id=guide.pk, token=guide.token)
        guide.refresh_from_db()
        assert guide.status == "ready", guide.error
        return guide

    Guide.objects.all().delete()
    mine = [
        written(guide_request_source(attachment=world.pdf)),
        written(guide_request_notebook(notebook_id=world.book.pk)),
    ]
    for body in fake.bodies:
        for message in body["messages"]:
            assert_nothing_of_bobs(str(message.get("content")), "a guide prompt")
    bobs = [
        written(guide_request_source(attachment=world.bobs_pdf)),
        written(guide_request_notebook(notebook_id=world.bobs_book.pk)),
    ]
    assert BOB_PDF in json.dumps(bobs[1].content())  # the control: his guide has it
    for guide in mine:
        assert guide.generator == "llm"
        assert_nothing_of_bobs(json.dumps(guide.content()), "Alice's guide")
    for url in (
        f"/attachments/{world.pdf.pk}/guide/",
        f"/notebooks/{world.book.pk}/guide/",
        f"/api/attachments/{world.pdf.pk}/guide",
        f"/api/notebooks/{world.book.pk}/guide",
    ):
        client = alice_api if url.startswith("/api/") else alice_client
        for headers in ({}, {"HX-Request": "true"}):
            response = client.get(url, headers=headers)
            assert response.status_code == 200
            assert_nothing_of_bobs(response.content.decode(), url)
    for url in (
        f"/attachments/{world.bobs_pdf.pk}/guide/",
        f"/notebooks/{world.bobs_book.pk}/guide/",
        f"/api/attachments/{world.bobs_pdf.pk}/guide",
        f"/api/notebooks/{world.bobs_book.pk}/guide",
    ):
        client = alice_api if url.startswith("/api/") else alice_client
        response = client.get(url)
        assert response.status_code == 404
        assert_nothing_of_bobs(response.content.decode(), url)


# --- chosen sources ---------------------------------------------------------------------------


def test_chosen_sources_naming_bobs_carry_nothing_of_his(world, alice_client, alice_api):
    """Chips naming Bob's notebook, note or PDF are refused alike (page, API); and should his
    ids reach a chat's selection anyway (a hand-edited question), every tool still searches
    only what Alice may see."""
    from chat.selection import SourceSet

    conversation = services.conversation_create(owner=world.alice, notebook=world.book)
    refs = [f"notebook:{world.bobs_note.notebook_id}", f"note:{world.bobs_note.pk}",
            f"attachment:{world.planted.attachment_id}"]  # fmt: skip
    for ref in refs:
        chips = json.dumps([{"kind": "file", "mode": "all", "ref": ref}])
        page = alice_client.post(f"/chats/{conversation.pk}/ask/",
                                 {"content": f"{CANARY_WORDS}?", "selections": chips})  # fmt: skip
        assert page.status_code == 200  # the form again, with the refusal
        assert "no longer available" in page.content.decode()
        assert_nothing_of_bobs(page.content.decode(), f"the ask form refusing {ref}")
        api = alice_api.post(f"/api/conversations/{conversation.pk}/messages",
                             json.dumps({"content": "?", "selections": json.loads(chips)}),
                             content_type="application/json")  # fmt: skip
        assert api.status_code == 404
        assert_nothing_of_bobs(api.content.decode(), f"the API refusing {ref}")
    assert not conversation.messages.exists()

    smuggled = SourceSet(attachments={world.planted.attachment_id, world.pdf.pk},
                         notes={world.bobs_note.pk, world.note.pk},
                         explicit={f"attachment:{world.planted.attachment_id}"})  # fmt: skip
    context = AnswerRequest(user=world.alice, notebook=world.book, selection=smuggled)
    for tool in tools_for(context):
        for arguments in tool_arguments(world, tool.name):
            result = tool.run(context, arguments)
            assert_nothing_of_bobs(result.content + json.dumps(result.passages), tool.name)
            assert {p["note_id"] for p in result.passages} <= {world.note.pk}


# --- document intelligence: profiles, the split view --------------------------------------------


def test_bobs_extracted_data_never_reaches_alice(world, alice_client, alice_api):
    from intelligence.models import SourceProfile
    from intelligence.services import profile_build, profile_edit, profile_request

    for pdf in (world.pdf, world.bobs_pdf):
        profile = profile_request(attachment_id=pdf.pk)
        assert profile is not None
        assert profile_build(profile_id=profile.pk, token=profile.token)
    bobs = SourceProfile.objects.get(attachment=world.bobs_pdf)
    profile_edit(profile=bobs, better_name=f"Bob's {CANARY}", extracted={"secret": BOB_SENTENCE})
    assert alice_client.get(f"/sources/{world.bobs_pdf.pk}/").status_code == 404
    assert alice_api.get(f"/api/attachments/{world.bobs_pdf.pk}/profile").status_code == 404
    own = alice_client.get(f"/sources/{world.pdf.pk}/")
    assert own.status_code == 200
    assert_nothing_of_bobs(own.content.decode(), "Alice's split view")
    api = alice_api.get(f"/api/attachments/{world.pdf.pk}/profile")
    assert api.status_code == 200
    assert_nothing_of_bobs(api.content.decode(), "Alice's profile API")
    workspace = alice_client.get(f"/notebooks/{world.book.pk}/").content.decode()
    assert_nothing_of_bobs(workspace, "the workspace with profiles")


def test_bobs_thumbnails_never_reach_alice(world, alice_client, settings):
    """Thumbnails (#17): Bob's files have theirs (made after ingestion, or on request for his
    pending one: none); Alice asking for them by id gets a 404 with nothing of them, and her
    pages link only her own."""
    from django.test import Client

    from attachments.thumbnails import thumbnail_path

    settings.MEDIA_ROOT = world.media
    bob = Client()
    bob.force_login(world.bob)
    bobs = bob.get(f"/attachments/{world.bobs_pdf.pk}/thumbnail/")
    assert bobs.status_code == 200
    # django-stubs types a test client's response as never streaming; this one is the view's
    # FileResponse.
    bobs_bytes = b"".join(bobs.streaming_content)  # type: ignore[attr-defined]
    assert bobs_bytes.startswith(b"RIFF")
    assert thumbnail_path(world.bobs_pdf).exists()
    for attachment in NoteAttachment.objects.filter(uploaded_by=world.bob):
        response = alice_client.get(f"/attachments/{attachment.pk}/thumbnail/")
        assert response.status_code == 404
        assert bobs_bytes[:64] not in response.content
        assert_nothing_of_bobs(response.content.decode(), "a thumbnail of Bob's")
    mine = alice_client.get(f"/attachments/{world.pdf.pk}/thumbnail/")
    assert mine.status_code == 200
    assert b"".join(mine.streaming_content) != bobs_bytes
    pages = [f"/notebooks/{world.book.pk}/", f"/notes/{world.note.pk}/", "/search/?q=sourdough"]
    for url in pages:
        html = alice_client.get(url, follow=True).content.decode()
        shown = set(re.findall(r"/attachments/(\d+)/thumbnail/", html))
        assert shown <= {str(world.pdf.pk)}, url


def test_metrics_carry_nothing_of_anyones(world, alice_client, alice_api):
    """/metrics (#18) is 404 for Alice; what staff read there after her searches and pages
    (Bob's ids and the canary's words among them) holds URL patterns and names: no query, no
    title, no id of anyone's object."""
    from django.test import Client
    from prometheus_client.parser import text_string_to_metric_families

    alice_client.get("/search/", {"q": CANARY_WORDS})
    alice_api.get("/api/search", {"q": CANARY, "mode": "hybrid"})
    alice_client.get(f"/notebooks/{world.bobs_book.pk}/notes/")
    alice_client.get(f"/notes/{world.note.pk}/")
    response = alice_client.get("/metrics")
    assert response.status_code == 404
    assert_nothing_of_bobs(response.content.decode(), "/metrics for Alice")
    staff = Client()
    staff.force_login(UserFactory.create(username="operator", is_staff=True))
    text = staff.get("/metrics").content.decode()
    assert "notebook_http_request_duration_seconds" in text
    assert_nothing_of_bobs(text, "/metrics")
    for words in (CANARY_WORDS, "Alice's library", "Millpond wildlife"):
        assert words not in text
    ids = {str(o.pk) for o in (world.bobs_book, world.bobs_note, world.bobs_pdf, world.book,
                               world.note, world.pdf)}  # fmt: skip
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values = [v for k, v in sample.labels.items() if k not in ("le", "quantile")]
            assert not ids & set(re.findall(r"\b\d+\b", " ".join(values))), sample


# --- a member of Alice's notebook -------------------------------------------------------------

DAVE_CANARY = "vrmk-canary-heron"
DAVE_SENTENCE = f"My private question mentions {DAVE_CANARY}: where do the herons nest?"


def test_a_members_private_conversation_and_memory_never_reach_the_owner(
    world, alice_client, alice_api
):
    """Dave is a viewer of Alice's library: he reads her sources and asks about them, in a
    conversation of his own whose question, answer, memory and summary carry his canary.
    Alice, the owner, never sees any of it: not in her pages, lists, memory, search, mention
    suggestions, nor in an answer to a follow-up she asks about the same PDF."""
    from chat.models import Memory, Message
    from notes.services import membership_add

    dave = UserFactory.create(username="dave")
    membership_add(notebook=world.book, by=world.alice, identifier="dave", role="viewer")
    his = services.conversation_create(owner=dave, notebook=world.book, note=world.note)
    ask(his, DAVE_SENTENCE)
    assert DAVE_CANARY in his.messages.get(role="user").content
    Message.objects.create(conversation=his, role="assistant", content=f"About {DAVE_CANARY} [1].")
    Memory.objects.create(owner=dave, notebook=world.book, kind="fact", text=DAVE_SENTENCE)
    answer = his.messages.filter(role="assistant").first()
    assert answer is not None
    his.summaries.create(text=DAVE_SENTENCE, first_message=answer, last_message=answer,
                         message_count=1, summarizer="extractive")  # fmt: skip

    def clean(text: str, where: str) -> None:
        # Alice types the canary's words, never the canary (one token to Postgres).
        for form in (DAVE_CANARY, escape(DAVE_CANARY), json.dumps(DAVE_CANARY)[1:-1]):
            assert form not in text, f"Dave's canary reached Alice in {where}"

    book = world.book.pk
    for url in ("/", f"/notebooks/{book}/", f"/notebooks/{book}/chats/",
                f"/notebooks/{book}/memories/", f"/notebooks/{book}/share/",
                f"/search/?q=vrmk+canary+heron&notebook={book}",
                f"/chats/mentions/?notebook={book}&q=&all=1"):  # fmt: skip
        response = alice_client.get(url)
        assert response.status_code == 200, url
        clean(response.content.decode(), url)
    assert alice_client.get(f"/chats/{his.pk}/").status_code == 404
    for url in ("/api/conversations", f"/api/conversations?notebook_id={book}",
                f"/api/notebooks/{book}/memories", "/api/search?q=vrmk+canary+heron",
                f"/api/notebooks/{book}/mentions?q="):  # fmt: skip
        response = alice_api.get(url)
        assert response.status_code == 200, url
        clean(response.content.decode(), url)
    assert alice_api.get(f"/api/conversations/{his.pk}/messages").status_code == 404
    assert alice_api.get(f"/api/conversations/{his.pk}/summaries").status_code == 404
    recalled = memories_for_prompt(user=world.alice, notebook=world.book, question=DAVE_SENTENCE)
    clean(json.dumps(recalled), "Alice's memories for a prompt")
    # Her own conversation about the same PDF: its follow-up never reaches into his.
    mine = services.conversation_create(owner=world.alice, notebook=world.book, note=world.note)
    ask(mine, "Where do the herons nest?")
    reply, events = ask(mine, "And what about the kingfishers?")
    clean(stored(reply) + without_arguments(events), "Alice's answer")
    assert reply.reply_to is not None
    clean(reply.reply_to.search_query, "Alice's searched query")


# --- Studio ----------------------------------------------------------------------------------


def test_studio_outputs_never_carry_anything_of_bobs(world, alice_client, alice_api, settings):
    """Every kind of Studio output Alice makes of her notebook (offline: search, definitions,
    the chat's answers; the audio overview spoken by a local speech server) holds nothing of
    Bob's, on its page, in the API and in its downloads; one whose stored scope names Bob's
    sources (a hand-edited row) reads only her notebook; Bob's outputs answer her 404."""
    from pdfminer.high_level import extract_text

    from core.transcription import sniff_audio_bytes
    from studio import services as studio
    from studio.models import StudioOutput
    from tests.fake_speech import fake_speech_server

    settings.MEDIA_ROOT = world.media
    settings.STUDIO_SPEECH_SLICE_SECONDS = 600.0  # the overview is spoken in one job
    outputs = []
    for kind in StudioOutput.Kind.values:
        output = studio.output_create(user=world.alice, notebook_id=world.book.pk, kind=kind)
        with fake_speech_server() as speaker:
            settings.SPEECH_MODEL, settings.SPEECH_BASE_URL = "fake-tts", speaker.url
            studio.output_write(output_id=output.pk, token=output.token)
        assert_nothing_of_bobs(json.dumps(speaker.requests), f"the speech of Alice's {kind}")
        output.refresh_from_db()
        assert output.status in ("ready", "failed"), (kind, output.error)
        assert_nothing_of_bobs(json.dumps(output.content), f"Alice's {kind}")
        outputs.append(output)
    assert any(o.status == "ready" and o.content["citations"] for o in outputs)  # the control
    smuggled = studio.output_create(user=world.alice, notebook_id=world.book.pk, kind="faq")
    StudioOutput.objects.filter(pk=smuggled.pk).update(
        scope=[
            f"attachment:{world.planted.attachment_id}",
            f"note:{world.bobs_note.pk}",
            f"attachment:{world.pdf.pk}",
        ]
    )
    studio.output_write(output_id=smuggled.pk, token=smuggled.token)
    smuggled.refresh_from_db()
    assert_nothing_of_bobs(json.dumps(smuggled.content), "a scope naming Bob's sources")
    assert {c["attachment_id"] for c in smuggled.content.get("citations", [])} <= {world.pdf.pk}
    for output in outputs:
        urls = [f"/studio/{output.pk}/", f"/api/studio/{output.pk}",
                f"/notebooks/{world.book.pk}/studio/",
                f"/api/notebooks/{world.book.pk}/studio"]  # fmt: skip
        if output.status == "ready":
            urls += [f"/studio/{output.pk}/export.md", f"/api/studio/{output.pk}/export"]
            urls += [
                f"/studio/{output.pk}/export.pdf",
                f"/api/studio/{output.pk}/export?format=pdf",
            ]
            if output.kind in ("flashcards", "quiz"):
                urls.append(f"/studio/{output.pk}/cards.csv")
            if output.kind == "audio":
                urls += [f"/studio/{output.pk}/audio.mp3", f"/api/studio/{output.pk}/audio"]
        for url in urls:
            client = alice_api if url.startswith("/api/") else alice_client
            response = client.get(url)
            assert response.status_code == 200, url
            if response.streaming:  # the MP3: spoken from her transcript, checked above
                head = b"".join(response.streaming_content)[:64]
                assert sniff_audio_bytes(head) == "mp3", url
                continue
            if response["Content-Type"] == "application/pdf":  # its text, as a reader sees it
                assert_nothing_of_bobs(extract_text(io.BytesIO(response.content)), url)
                continue
            assert_nothing_of_bobs(response.content.decode(), url)
    bobs = studio.output_create(user=world.bob, notebook_id=world.bobs_book.pk, kind="briefing")
    studio.output_write(output_id=bobs.pk, token=bobs.token)
    bobs.refresh_from_db()
    assert BOB_PDF in json.dumps(bobs.content)  # the control: his has his
    for url in (f"/studio/{bobs.pk}/", f"/studio/{bobs.pk}/export.md", f"/api/studio/{bobs.pk}",
                f"/api/studio/{bobs.pk}/export", f"/notebooks/{world.bobs_book.pk}/studio/",
                f"/studio/{bobs.pk}/audio.mp3", f"/api/studio/{bobs.pk}/audio",
                f"/studio/{bobs.pk}/export.pdf", f"/api/studio/{bobs.pk}/export?format=pdf",
                f"/api/notebooks/{world.bobs_book.pk}/studio"):  # fmt: skip
        client = alice_api if url.startswith("/api/") else alice_client
        response = client.get(url)
        assert response.status_code == 404, url
        assert_nothing_of_bobs(response.content.decode(), url)
