"""Studio with a chat model (a local fake server speaking OpenAI's protocol): the FAQ's answers
are the model's, each sentence checked against the passage it cites (an embellishing model's
invented claims never become statements), the output names the model; with the model-call
budget spent the offline answerer answers instead and no model is named."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from core.llm import forget_servers
from grounding.citations import MARKER
from studio import services
from tests.fake_chat import FABRICATED, fake_chat_server

pytestmark = pytest.mark.django_db


def faq(library):
    output = services.output_create(user=library.alice, notebook_id=library.book.pk, kind="faq")
    services.output_write(output_id=output.pk, token=output.token)
    output.refresh_from_db()
    return output


@pytest.mark.parametrize("profile", ["strict", "embellish"])
def test_the_models_answers_are_checked_sentence_by_sentence(library, settings, profile):
    forget_servers()
    with fake_chat_server(profile) as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        output = faq(library)
    forget_servers()
    assert output.status == "ready", output.error
    assert output.model == "fake-model"
    assert server.requests  # the model was asked
    items = output.content["sections"][0]["items"]
    assert items
    quotes = {c["n"]: c["quote"] for c in output.content["citations"]}
    for item in items:
        assert MARKER.search(item["text"])
        # What is left of each answer is what its quotes back: no invented claim survives.
        assert FABRICATED[:40] not in item["text"]
        assert "Napoleon" not in item["text"]
        assert all(int(n) in quotes for n in MARKER.findall(item["text"]))


def test_a_spent_budget_answers_offline(library, settings):
    forget_servers()
    with fake_chat_server() as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        settings.MODEL_CALL_BUDGET = "1/h"  # one answer by the model, the rest offline
        output = faq(library)
    forget_servers()
    assert output.status == "ready", output.error
    assert output.model == "fake-model"  # the one answer the budget allowed
    assert len(output.content["sections"][0]["items"]) > 1  # the others answered offline
    asked = {str(b["messages"][-1]["content"])[:80] for b in server.bodies if b.get("tools")}
    assert len(asked) == 1, asked


def _dialogue(view):
    """The hosts' lines for the statements the request lists: true ones citing them, a
    question, and two invented claims (one citing [1], one citing nothing)."""
    from tests.fake_chat import Metadata

    user = next(m["content"] for m in view["messages"] if m["role"] == "user")
    said = re.findall(r"^\[(\d+)\] (.+)$", str(user), re.MULTILINE)
    lines = [{"speaker": "A", "text": "What do the sources say first?"}]
    for i, (n, text) in enumerate(said[:6]):
        lines.append({"speaker": "B" if i % 2 else "A", "text": f"{text} [{n}]"})
    lines.insert(2, {"speaker": "A", "text": f"Napoleon crossed the Alps with {FABRICATED} [1]"})
    lines.append({"speaker": "B", "text": "Napoleon invented the movable-frame hive in 1805."})
    return Metadata({"lines": lines})


def overview(library, settings, respond):
    """An audio overview written with a fake chat model answering by `respond` and spoken by a
    fake speech server in one job: the output, the chat server and the speech server."""
    from tests.fake_speech import fake_speech_server

    forget_servers()
    with fake_chat_server() as server, fake_speech_server() as speaker:
        server.respond = respond
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        settings.SPEECH_MODEL, settings.SPEECH_BASE_URL = "fake-tts", speaker.url
        settings.STUDIO_SPEECH_SLICE_SECONDS = 600.0
        output = services.output_create(
            user=library.alice, notebook_id=library.book.pk, kind="audio"
        )
        services.output_write(output_id=output.pk, token=output.token)
    forget_servers()
    output.refresh_from_db()
    return output, server, speaker


def test_an_audio_overview_is_a_conversation_whose_lines_their_quotes_back(library, settings):
    output, _server, speaker = overview(library, settings, _dialogue)
    assert output.status == "ready", output.error
    assert output.model == "fake-model"
    lines = output.content["sections"][0]["items"]
    text = " ".join(line["text"] for line in lines)
    assert "Napoleon" not in text  # neither invented line survives
    assert "What do the sources say first?" in text
    assert {line["speaker"] for line in lines} == {0, 1}
    cited = [line for line in lines if line.get("cited", True)]
    assert len(cited) >= 4
    assert all(MARKER.search(line["text"]) for line in cited)
    assert len(speaker.requests) == len(lines)


def test_an_audio_overview_is_narrated_when_the_model_sends_junk(library, settings):
    from tests.fake_chat import Metadata

    output, server, _speaker = overview(library, settings, lambda view: Metadata("not json"))
    assert output.status == "ready", output.error
    assert output.model == ""  # the narration: nothing of the model's
    assert server.requests
    assert output.content["sections"][0]["items"][0]["cited"] is False


# --- Reports and the mind map written by the model ------------------------------------------


def written(library, settings, kind, *, profile="strict", respond=None):
    forget_servers()
    with fake_chat_server(profile) as server:
        if respond is not None:
            server.respond = lambda view: respond(view) or server.default_turn(view)
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        output = services.output_create(user=library.alice, notebook_id=library.book.pk, kind=kind)
        services.output_write(output_id=output.pk, token=output.token)
    forget_servers()
    output.refresh_from_db()
    return output, server


def _studio_requests(server, words):
    return [b for b in server.bodies if not b.get("stream") and words in str(b["messages"][0])]


def _texts(content):
    def walk(item):
        own = [str(item[k]) for k in ("text", "label", "back") if item.get(k)]
        return own + [t for c in item.get("children") or [] for t in walk(c)]

    return [t for s in content["sections"] for i in s["items"] for t in walk(i)]


def _briefly(view):
    """A model that writes each group's first statement after a lead-in of its own
    ("Briefly: …", which claims nothing), and invents one claim citing that statement."""
    from tests.fake_chat import STUDIO_WRITING, Metadata, studio_writing

    if STUDIO_WRITING not in str(view["messages"][0]["content"]):
        return None
    reply = studio_writing(view, embellish=True).data
    assert isinstance(reply, dict)
    for entry in reply.get("items", []):
        entry["text"] = f"Briefly: {entry['text']}"
    for part in reply.get("sections", []):
        part["points"] = [f"Briefly: {p}" for p in part["points"]]
    return Metadata(reply)


@pytest.mark.parametrize("kind", ["briefing", "study_guide", "timeline"])
def test_a_report_is_written_by_the_model_and_keeps_only_what_its_quotes_back(
    library, settings, kind
):
    output, server = written(library, settings, kind, respond=_briefly)
    assert output.status == "ready", output.error
    assert output.model == "fake-model"
    assert output.generator == "llm"
    assert _studio_requests(server, "numbered statements")  # the report was asked for
    texts = _texts(output.content)
    assert any(t.startswith("Briefly:") for t in texts)  # the model's own words are shown
    items = [i for s in output.content["sections"] for i in s["items"]]
    assert all(i.get("written") for i in items if i["text"].startswith("Briefly:"))
    assert not any("Napoleon" in t for t in texts)  # its invented claims are not
    quotes = {c["n"] for c in output.content["citations"]}
    for item in (i for s in output.content["sections"] for i in s["items"]):
        if item.get("cited", True):
            assert MARKER.search(item["text"]), item
            assert {int(n) for n in MARKER.findall(item["text"])} <= quotes
    page = Client()
    page.force_login(library.alice)
    shown = page.get(f"/studio/{output.pk}/").content.decode()
    assert "Written by fake-model" in shown


@pytest.mark.parametrize("profile", ["strict", "embellish"])
def test_the_profiles_of_real_servers_write_a_briefing_or_leave_it_quoted(
    library, settings, profile
):
    output, server = written(library, settings, "briefing", profile=profile)
    assert output.status == "ready", output.error
    assert _studio_requests(server, "numbered statements")
    assert not any("Napoleon" in t for t in _texts(output.content))
    assert output.content["sections"][0]["items"]  # a summary, the model's or quoted


def test_a_briefing_stays_quoted_when_the_model_sends_junk(library, settings):
    from tests.fake_chat import Metadata

    output, server = written(
        library, settings, "briefing", respond=lambda view: Metadata("not json at all")
    )
    assert output.status == "ready", output.error
    assert output.model == ""
    assert output.generator == "offline"
    assert _studio_requests(server, "numbered statements")


def test_a_briefing_stays_quoted_when_the_model_refuses(library, settings):
    from tests.fake_chat import Refusal

    output, _server = written(library, settings, "briefing", respond=lambda view: Refusal())
    assert output.status == "ready", output.error
    assert output.model == ""


def test_the_mind_maps_topics_are_grouped_into_themes_the_model_names(library, settings):
    def hostile(view):
        from tests.fake_chat import STUDIO_THEMES, Metadata

        if STUDIO_THEMES not in str(view["messages"][0]["content"]):
            return None
        return Metadata({"themes": [
            {"name": "<img src=x onerror=alert(1)> Bees [3]", "topics": [1, 2, 99]},
            {"name": "Water", "topics": [2, 3]},  # 2 again: each topic once
            {"name": "", "topics": [4]},  # no name: not a theme
        ]})  # fmt: skip

    output, _server = written(library, settings, "mind_map", respond=hostile)
    assert output.status == "ready", output.error
    assert output.model == "fake-model"
    root = output.content["sections"][0]["items"][0]
    topics = root["children"][-1]
    themes = [c for c in topics["children"] if c.get("theme")]
    assert [t["label"] for t in themes] == ["<img src=x onerror=alert(1)> Bees", "Water"]
    assert all(t["cited"] is False and t["children"] for t in themes)
    leaves = [c["label"] for t in themes for c in t["children"]] + [
        c["label"] for c in topics["children"] if not c.get("theme")
    ]
    assert len(leaves) == len(set(leaves))  # each topic once
    page = Client()
    page.force_login(library.alice)
    shown = page.get(f"/studio/{output.pk}/").content.decode()
    assert "<img src=x" not in shown
    assert "&lt;img src=x" in shown
    assert "The themes were named by fake-model" in shown


def test_with_the_budget_spent_the_reports_stay_quoted(library, settings):
    settings.MODEL_CALL_BUDGET = "0/h"
    output, server = written(library, settings, "timeline")
    assert output.status == "ready", output.error
    assert output.model == ""
    assert not _studio_requests(server, "numbered statements")


@pytest.mark.parametrize(
    "kind", ["briefing", "study_guide", "faq", "timeline", "mind_map", "flashcards", "quiz"]
)
def test_every_kind_completes_with_a_strict_servers_model_and_every_citation_verified(
    library, settings, kind
):
    """llama-cpp-python's behaviours (json_schema refused, tools dropped, usage missing, …):
    each kind still completes, and every statement's markers name a verified citation."""
    output, _server = written(library, settings, kind, profile="strict")
    assert output.status == "ready", output.error
    quotes = {c["n"]: c for c in output.content["citations"]}
    assert quotes
    assert all(c.get("quote") for c in quotes.values())
    texts = _texts(output.content)
    assert not any("Napoleon" in t for t in texts)
    for text in texts:
        assert {int(n) for n in MARKER.findall(text)} <= set(quotes)
