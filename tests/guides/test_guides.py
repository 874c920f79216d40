"""Guides in-process on a real ingested PDF: the chat-model path against a local fake server
(valid cited JSON, an unverifiable citation, junk, invalid JSON, a refusal, 429, a hang),
fencing of stale runs, the notebook guide's debounce, the partials, starters and the API."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.template.loader import render_to_string
from django.test import override_settings
from django_q.models import OrmQ, Schedule

from chat import services as chat_services
from core.breakers import breaker
from core.llm import forget_servers
from core.models import Job
from grounding.citations import normalise, quotable
from grounding.evidence import sentences
from guides import services
from guides.models import Guide
from guides.services import content, writing
from notes.services import note_create, notebook_create
from tests.factories import UserFactory
from tests.fake_chat import Hang, Metadata, Refusal, Status, fake_chat_server, sources_in
from tests.fixtures.documents import ingest, upload

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory):
    """The sample text.pdf ingested once for the module and committed; each test runs in a
    transaction on top of it (the offline guide's three sentences come from it)."""
    with django_db_blocker.unblock(), override_settings(MEDIA_ROOT=tmp_path_factory.mktemp("m")):
        queued = set(OrmQ.objects.values_list("pk", flat=True))
        schedules = set(Schedule.objects.values_list("pk", flat=True))
        alice = UserFactory.create(username="alice")
        book = notebook_create(owner=alice, title="Field notes")
        note = note_create(notebook=book, author=alice, title="Wildlife", body="")
        pdf = ingest(upload(alice, note, "text.pdf"))
        assert pdf.status == "ready", pdf.error
        try:
            yield SimpleNamespace(alice=alice, book=book, note=note, pdf=pdf)
        finally:
            User.objects.filter(username="alice").delete()
            OrmQ.objects.exclude(pk__in=queued).delete()
            Schedule.objects.exclude(pk__in=schedules).delete()


def write(guide: Guide) -> Guide:
    services.guide_write(guide_id=guide.pk, token=guide.token)
    guide.refresh_from_db()
    return guide


def source_guide(world: SimpleNamespace) -> Guide:
    Guide.objects.filter(attachment=world.pdf).delete()
    return write(services.guide_request_source(attachment=world.pdf))


@pytest.fixture
def fake(settings):
    forget_servers()
    with fake_chat_server() as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        yield server
    forget_servers()


def guide_calls(fake) -> list[dict[str, Any]]:
    return [b for b in fake.bodies if "guide to a reader" in str(b["messages"][0]["content"])]


def first_sentence(text: str) -> str:
    return sentences(text)[0]


def cited_reply(body: dict[str, Any], *, bad_quote: bool = False) -> Metadata:
    """A model that summarises with quotes copied from the passages it was shown."""
    shown = sources_in(body["messages"][-1]["content"])
    summary = [
        {
            "text": f"Passage {n} says this [{n}].",
            "citations": [{"n": n, "quote": first_sentence(t)}],
        }
        for n, t in list(shown.items())[:3]
    ]
    if bad_quote:
        summary.append(
            {
                "text": "The package was written on the Moon.",
                "citations": [{"n": 1, "quote": "It was written on the Moon in 1802."}],
            }
        )
        summary.append({"text": "An uncited claim.", "citations": []})
    return Metadata(
        {
            "summary": summary,
            "topics": ["Herons at the millpond", "Otters"],
            "questions": ["Where does the grey heron wait until dusk?", "Who likes cheese?"],
        }
    )


def test_a_model_guide_with_verified_citations_is_stored_as_the_models(world, fake):
    fake.respond = cited_reply
    guide = source_guide(world)
    assert guide.status == "ready"
    assert (guide.generator, guide.model) == ("llm", "fake-model")
    (call,) = guide_calls(fake)
    shown = sources_in(call["messages"][-1]["content"])
    assert len(guide.summary) == min(3, len(shown))
    pages = {p.number: quotable(p.text) for p in world.pdf.pages.all()}
    for n, sentence in enumerate(guide.summary, start=1):
        assert sentence["text"] == f"Passage {n} says this."  # markers stripped: plain text
        assert not sentence["quoted"]
        (citation,) = sentence["citations"]
        assert citation["quote"] == first_sentence(shown[n])
        assert citation["quote"] in pages[citation["page"]]
    assert guide.topics[:2] == ["Herons at the millpond", "Otters"]
    asked = [q["text"] for q in guide.questions]
    assert "Where does the grey heron wait until dusk?" in asked
    assert "Who likes cheese?" not in asked  # no passage answers it
    assert guide.outline  # the document's own headings, not the model's


def test_an_unverifiable_or_missing_citation_drops_its_sentence(world, fake):
    fake.respond = lambda body: cited_reply(body, bad_quote=True)
    guide = source_guide(world)
    assert guide.generator == "llm"
    texts = [s["text"] for s in guide.summary]
    assert "The package was written on the Moon." not in texts
    assert "An uncited claim." not in texts
    assert texts
    assert all(t.startswith("Passage ") for t in texts)


def assert_offline(guide: Guide) -> None:
    assert guide.status == "ready"
    assert (guide.generator, guide.model) == ("offline", "")
    assert 3 <= len(guide.summary) <= 5
    assert all(s["quoted"] for s in guide.summary)


@pytest.mark.parametrize(
    "turn",
    [
        Metadata("Sure! Here is a guide: it is about URLs."),
        Metadata('{"summary": [{"text": "x"'),
        Metadata({"summary": "not a list"}),
        Refusal(),
        Status(429),
        Status(500),
        Hang(5),
    ],
    ids=["junk", "invalid-json", "wrong-shape", "refusal", "429", "500", "hang"],
)
def test_a_failing_model_gives_the_offline_guide(world, fake, settings, turn):
    settings.CHAT_TIMEOUT = 1  # the hang outlasts it
    fake.script = [turn] * 6  # every structured-output level, and the SDK's retries
    guide = source_guide(world)
    assert guide_calls(fake)
    assert_offline(guide)
    assert not guide.error


def test_a_model_whose_every_sentence_is_unverifiable_gives_the_offline_guide(world, fake):
    fake.script = [
        Metadata(
            {
                "summary": [
                    {
                        "text": "Made up.",
                        "citations": [{"n": 1, "quote": "Nothing like this is in the PDF."}],
                    }
                ],
                "topics": [],
                "questions": [],
            }
        )
    ]
    assert_offline(source_guide(world))


def test_offline_without_a_model(world, settings):
    settings.CHAT_MODEL = ""
    assert_offline(source_guide(world))


def test_beyond_the_owners_model_call_budget_the_guide_is_offline_and_says_so(
    world, fake, settings, alice_client
):
    settings.MODEL_CALL_BUDGET = "1/h"
    fake.respond = cited_reply
    assert source_guide(world).generator == "llm"
    guide = source_guide(world)
    assert len(guide_calls(fake)) == 1  # the second guide asked no model
    assert_offline(guide)
    assert guide.error == writing.BUDGET_SPENT
    assert (breaker("llm").state, breaker("llm").failures) == ("closed", 0)
    page = alice_client.get(f"/attachments/{world.pdf.pk}/guide/", headers={"HX-Request": "true"})
    assert f"No language model was used. {writing.BUDGET_SPENT}</p>" in page.content.decode()


# --- fencing and debounce


def test_a_run_for_an_older_token_writes_nothing(world, settings):
    settings.CHAT_MODEL = ""
    Guide.objects.filter(attachment=world.pdf).delete()
    guide = services.guide_request_source(attachment=world.pdf)
    old = guide.token
    Guide.objects.filter(pk=guide.pk).update(status="processing")  # a run has it
    services.guides_after_reprocess(attachment=world.pdf)  # the PDF is queued again
    guide.refresh_from_db()
    assert guide.token == old + 1
    services.guide_write(guide_id=guide.pk, token=old)
    guide.refresh_from_db()
    assert (guide.status, guide.summary) == ("pending", [])


def test_a_run_superseded_half_way_does_not_write(world, settings, monkeypatch):
    settings.CHAT_MODEL = ""
    Guide.objects.filter(attachment=world.pdf).delete()
    guide = services.guide_request_source(attachment=world.pdf)
    real = content.central_passages

    def asked_again_meanwhile(*args: Any, **kwargs: Any) -> Any:
        Guide.objects.filter(pk=guide.pk).update(token=guide.token + 1, status="pending")
        return real(*args, **kwargs)

    monkeypatch.setattr(content, "central_passages", asked_again_meanwhile)
    services.guide_write(guide_id=guide.pk, token=guide.token)
    guide.refresh_from_db()
    assert (guide.status, guide.summary, guide.ready_at) == ("pending", [], None)


def test_a_burst_of_changes_makes_one_delayed_refresh(world, settings):
    settings.GUIDE_NOTEBOOK_DELAY = 30
    Guide.objects.filter(kind="notebook").delete()
    before = Schedule.objects.count()
    first = services.guide_request_notebook(notebook_id=world.book.pk)
    for _ in range(3):  # more sources change before the delayed run starts
        Guide.objects.filter(pk=first.pk).update(wanted="something else")
        again = services.guide_request_notebook(notebook_id=world.book.pk)
    assert again.token == first.token  # not asked for again: the queued run reads the sources
    assert again.wanted == first.wanted
    assert again.not_before == first.not_before
    assert Schedule.objects.count() == before  # queued on commit: nothing yet …


def test_the_delayed_refresh_is_queued_once_on_commit(
    world, settings, django_capture_on_commit_callbacks
):
    settings.GUIDE_NOTEBOOK_DELAY = 30
    Guide.objects.filter(kind="notebook").delete()
    before = set(Schedule.objects.values_list("pk", flat=True))
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(4):
            guide = services.guide_request_notebook(notebook_id=world.book.pk)
            Guide.objects.filter(pk=guide.pk).update(wanted="changed")
    (scheduled,) = Schedule.objects.exclude(pk__in=before)
    (job,) = Job.objects.filter(func="guides.tasks.write_guide", not_before=guide.not_before)
    assert (job.args, job.user_id) == ([guide.pk, guide.token], world.alice.pk)
    assert (scheduled.func, scheduled.args) == ("core.jobs.job_run_next", f"({job.pk},)")
    assert scheduled.next_run == guide.not_before  # the job's ticket fires when it is due
    # Not due yet: a task delivered early claims nothing.
    services.guide_write(guide_id=guide.pk, token=guide.token)
    guide.refresh_from_db()
    assert guide.status == "pending"


def test_the_notebook_guide_is_written_over_its_ready_sources(world, settings):
    settings.CHAT_MODEL = ""
    settings.GUIDE_NOTEBOOK_DELAY = 0
    Guide.objects.filter(kind="notebook").delete()
    guide = write(services.guide_request_notebook(notebook_id=world.book.pk))
    assert guide.status == "ready"
    assert guide.title == "Field notes"
    assert guide.sources == [{"attachment_id": world.pdf.pk, "file": "text.pdf"}]
    assert guide.summary
    assert guide.built_from == guide.wanted
    # Unchanged sources: asking again queues nothing.
    assert services.guide_request_notebook(notebook_id=world.book.pk).token == guide.token


# --- pages, partials, API


def test_the_partials_show_the_guide_as_text(world, settings, alice_client):
    settings.CHAT_MODEL = ""
    guide = source_guide(world)
    Guide.objects.filter(pk=guide.pk).update(
        title="<script>alert(1)</script>", topics=["<b>bold</b>"]
    )
    response = alice_client.get(
        f"/attachments/{world.pdf.pk}/guide/", headers={"HX-Request": "true"}
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page
    assert 'data-status="ready"' in page
    assert "hx-trigger" not in page  # ready: no polling
    for sentence in guide.summary:
        assert normalise(sentence["text"]).replace('"', "&quot;")[:40] in normalise(page)
    full = alice_client.get(f"/attachments/{world.pdf.pk}/guide/").content.decode()
    assert "css/guides.css" in full
    assert "<html" in full


def test_a_guide_being_written_polls(world, alice_client):
    Guide.objects.filter(attachment=world.pdf).delete()
    services.guide_request_source(attachment=world.pdf)
    page = alice_client.get(
        f"/attachments/{world.pdf.pk}/guide/", headers={"HX-Request": "true"}
    ).content.decode()
    assert 'data-status="pending"' in page
    assert 'hx-trigger="every 2s"' in page
    assert "Writing the guide" in page


def test_starters_ask_their_question_in_the_conversation(world, settings, alice_client):
    settings.CHAT_MODEL = ""
    guide = source_guide(world)
    assert guide.questions
    conversation = chat_services.conversation_create(owner=world.alice, notebook=world.book)
    html = render_to_string("guides/_starters.html", {"guide": guide, "conversation": conversation})
    assert html.count("ws-send") == len(guide.questions)
    assert html.count(f'action="/chats/{conversation.pk}/ask/"') == len(guide.questions)
    for question in guide.questions:
        assert f'name="content" value="{question["text"]}"'.replace("“", "“") in html
    # Through the partial: ?conversation= adds the chips.
    page = alice_client.get(
        f"/notebooks/{world.book.pk}/guide/?conversation={conversation.pk}",
        headers={"HX-Request": "true"},
    ).content.decode()
    assert 'data-testid="notebook-guide"' in page
    # And a chip posts a real question.
    response = alice_client.post(
        f"/chats/{conversation.pk}/ask/", {"action": "ask", "content": guide.questions[0]["text"]}
    )
    assert response.status_code in (200, 302)
    assert conversation.messages.filter(role="user", content=guide.questions[0]["text"]).exists()


def test_the_api_returns_the_guides(world, settings, alice_api):
    settings.CHAT_MODEL = ""
    guide = source_guide(world)
    body = alice_api.get(f"/api/attachments/{world.pdf.pk}/guide").json()
    assert (body["kind"], body["status"], body["generator"]) == ("source", "ready", "offline")
    assert body["summary"] == json.loads(json.dumps(guide.summary))
    assert [q["text"] for q in body["questions"]] == [q["text"] for q in guide.questions]
    notebook = alice_api.get(f"/api/notebooks/{world.book.pk}/guide").json()
    assert notebook["kind"] == "notebook"
    assert notebook["status"] in ("pending", "processing", "ready")
