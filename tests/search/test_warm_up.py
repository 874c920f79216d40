"""The first search after start never waits for the embedding model: the web process loads it
in a background (daemon) thread, and a search that arrives meanwhile runs its keyword leg only
and says so; once the model is in, the vector leg joins.

The model load is held with `core.embeddings._construct` replaced by one that waits (for
an Event in this process, for a file in a forked server), so nothing here depends on timing."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from accounts.services import api_token_create
from core import embeddings
from tests.daphne_server import start_daphne
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.answers import ask_a_note
from tests.fixtures.search import HELD_FOR, make_attachment
from tests.fixtures.waiting import poll

ROOT = Path(__file__).resolve().parents[2]
WARMING = "Warming up the search model: these results match your words only"


@pytest.fixture
def library(alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice, title="Mine"))
    make_attachment(note, ["Use sink to divert output to a log file."], config="english")
    return note


def _warm_up() -> threading.Thread:
    thread = embeddings.warm_up_in_background()
    assert thread is not None
    return thread


@pytest.mark.django_db
def test_a_search_during_the_warm_up_is_lexical_and_says_so_then_the_vector_leg_joins(
    held_load, alice_client, alice_api, library
):
    thread = _warm_up()
    assert thread.daemon  # never keeps the process alive at shutdown
    assert held_load.started.wait(HELD_FOR)
    assert embeddings.warming_up()

    page = alice_client.get("/search/", {"q": "sink output"}).content.decode()
    assert WARMING in page
    assert "<mark>sink</mark>" in page  # the keyword leg answered
    assert 'hx-trigger="load delay:3s"' in page  # the results region asks again by itself
    body = alice_api.get("/api/search", {"q": "sink output"}).json()
    assert body["warming_up"] is True
    assert body["info"]["warming_up"] is True
    assert "still loading" in body["info"]["degraded"]  # what older clients already read
    assert body["hits"][0]["snippet"].startswith("Use sink to divert")
    assert "embed_query" not in body["timings_ms"]
    assert thread.is_alive()  # the searches above did not wait for the load

    held_load.release()
    thread.join(HELD_FOR)
    assert not thread.is_alive()
    assert not embeddings.warming_up()
    body = alice_api.get("/api/search", {"q": "sink output"}).json()
    assert body["warming_up"] is False
    assert "embed_query" in body["timings_ms"]  # the query was embedded: the vector leg ran
    assert "degraded" not in body["info"]
    # What the region gets when it asks again: the results alone, no longer asking.
    region = alice_client.get("/search/", {"q": "sink output"}, headers={"HX-Request": "true"})
    html = region.content.decode()
    assert html.lstrip().startswith('<div id="search-results"')
    assert "<mark>sink</mark>" in html
    assert WARMING not in html
    assert "hx-trigger" not in html


@pytest.mark.django_db
def test_a_vector_search_during_the_warm_up_says_to_come_back(held_load, alice_client, library):
    thread = _warm_up()
    page = alice_client.get("/search/", {"q": "sink", "mode": "vector"}).content.decode()
    assert "meaning-based results appear here in a few seconds" in page
    assert "Meaning-based search is not ready yet." in page
    assert thread.is_alive()


@pytest.mark.django_db
def test_a_chat_answer_during_the_warm_up_does_not_wait_and_carries_a_notice(held_load, alice):
    thread = _warm_up()
    assert held_load.started.wait(HELD_FOR)
    done = ask_a_note(
        alice, "Loops", "The break statement ends any loop early.", "How does a loop end early?"
    )
    assert done.status == "complete"
    assert "still loading" in done.metadata["notice"]
    assert "The break statement ends any loop early." in done.content
    assert thread.is_alive()  # neither retrieval nor the grounding of sentences waited


def test_ranking_a_conversation_during_the_warm_up_is_lexical(held_load):
    """Reformulation and memories rank a conversation's texts with search.texts.hybrid_rank:
    stored vectors or not, it does not wait for the query's vector while the model loads."""
    from search.texts import hybrid_rank

    thread = _warm_up()
    assert held_load.started.wait(HELD_FOR)
    items = [(1, "the sink function diverts output", [1.0, 0.0]), (2, "plots", [0.0, 1.0])]
    assert hybrid_rank("sink output", items, limit=2) == [1]
    assert thread.is_alive()


def test_no_warm_up_when_it_is_off_or_the_backend_is_remote(settings, held_load):
    settings.EMBEDDING_WARM_UP = False
    assert embeddings.warm_up_in_background() is None
    settings.EMBEDDING_WARM_UP = True
    settings.EMBEDDING_BACKEND = "openai"
    assert embeddings.warm_up_in_background() is None
    assert not held_load.started.is_set()


def _threads_after(code: str) -> str:
    env = {**os.environ, "EMBEDDING_WARM_UP": "1", "DJANGO_SETTINGS_MODULE": "notebook.settings"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        check=True, timeout=300,
    ).stdout  # fmt: skip


SHOW_THREADS = (
    "import threading; print(sorted(f'{t.name}:{t.daemon}' for t in threading.enumerate()))"
)


@pytest.mark.slow
def test_the_asgi_application_starts_the_warm_up_and_manage_py_commands_do_not():
    """`serve` runs daphne on notebook.asgi, whose import starts the warm-up; other commands
    never import it. The process below exits while the model may still be loading."""
    served = _threads_after(f"import notebook.asgi; {SHOW_THREADS}")
    assert "'embedding-warm-up:True'" in served
    command = _threads_after(
        "import sys, django; django.setup(); from django.core.management import call_command; "
        f"call_command('check'); {SHOW_THREADS}"
    )
    assert "embedding-warm-up" not in command


# --- a real server, its model load held --------------------------------------------------------


def _warming_application() -> Any:  # module level: the forked server process calls it
    from notebook.asgi import application

    # This test process imported notebook.asgi long ago (and the fork inherits that import),
    # so the warm-up that a fresh server starts at that import is started here.
    embeddings.warm_up_in_background()
    return application


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_first_search_of_a_fresh_server_answers_while_the_model_is_still_loading(
    held_load, alice, library, tmp_path
):
    released = tmp_path / "release"
    held_load.wait = lambda: _wait_for(released.exists)  # across processes: a file
    _, token = api_token_create(user=alice, name="tests")
    server = start_daphne(_warming_application)
    try:
        url = f"http://localhost:{server.port.value}/api/search"
        headers = {"Authorization": f"Bearer {token}"}
        first = requests.get(url, params={"q": "sink output"}, headers=headers, timeout=120)
        assert first.status_code == 200
        assert first.json()["warming_up"] is True
        assert first.json()["hits"]
        assert not released.exists()  # the load was still held when the search answered

        released.touch()

        def warm() -> bool:
            body = requests.get(url, params={"q": "sink output"}, headers=headers, timeout=120)
            return not body.json()["warming_up"]

        assert _wait_for(warm)
        body = requests.get(url, params={"q": "sink output"}, headers=headers, timeout=120)
        assert "embed_query" in body.json()["timings_ms"]
    finally:
        server.terminate()
        server.join(30)


def _wait_for(condition: Callable[[], bool]) -> bool:
    return bool(poll(condition, HELD_FOR, interval=0.2))


def test_a_follow_up_does_not_wait_for_the_warm_up_to_rank_earlier_messages(
    alice, held_load, monkeypatch
):
    """The reformulator ranks a conversation's earlier messages by words and meaning; while the
    model loads it ranks them by words, and embeds them later (not while the user waits)."""
    from chat import reformulation
    from chat.models import Conversation, Message
    from notes.services import notebook_create

    notebook = notebook_create(owner=alice, title="Warm-up")
    conversation = Conversation.objects.create(owner=alice, notebook=notebook, title="t")
    said = [
        Message.objects.create(conversation=conversation, role="user", content=text)
        for text in ("How do URLs break?", "What about colons in addresses?")
    ]
    embeddings.warm_up_in_background()
    assert held_load.started.wait(HELD_FOR)
    asked_for_the_model: list[bool] = []

    def get_embedder() -> embeddings.Embedder:
        asked_for_the_model.append(True)
        raise RuntimeError("the real one would wait here for the held load")

    monkeypatch.setattr(embeddings, "get_embedder", get_embedder)
    ranked = reformulation._embedded(said)
    assert asked_for_the_model == []
    assert [pk for pk, _, _ in ranked] == [m.pk for m in said]
    assert all(vector == [] for _, _, vector in ranked)
    assert not Message.objects.filter(embedding__isnull=False).exists()
    held_load.release()
