"""The chat pages through the test client: conversation lists, create/rename/delete, the
conversation page rendering saved messages (sanitized Markdown, citation chips, badges, retry,
the streaming state), the plain-form fallbacks, and another user's ids."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.test import Client

from chat import services
from chat.models import Conversation, Message
from notes.services import note_create
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.answers import answered, citation, html_of
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.django_db
# manual.pdf (tests/samples/) answers it on page 2: a lead-in and a list of three.
QUESTION = "What does lantern build check before it writes anything?"


@pytest.fixture
def notebook(alice):
    return NotebookFactory.create(owner=alice, title="TeX")


@pytest.fixture
def note(alice, notebook):
    return NoteFactory.create(
        notebook=notebook, author=alice, title="URLs in LaTeX", body="Colons and slashes."
    )


@pytest.fixture
def conversation(alice, notebook, note) -> Conversation:
    return services.conversation_create(owner=alice, notebook=notebook, note=note)


# --- entry points and lists -------------------------------------------------------------------


def test_notebook_and_note_pages_offer_to_ask(alice_client, notebook, note):
    # The notebook page is the workspace: its empty chat asks (and starts a conversation).
    notebook_page = html_of(alice_client.get(f"/notebooks/{notebook.pk}/"))
    assert f'action="/notebooks/{notebook.pk}/ask/"' in notebook_page
    assert "Ask your first question." in notebook_page
    note_page = html_of(alice_client.get(f"/notes/{note.pk}/"))
    assert f'action="/notes/{note.pk}/chats/"' in note_page
    assert "Ask about this note’s PDFs" in note_page
    assert f'href="/notes/{note.pk}/chats/"' in note_page


def test_ask_this_notebook_starts_a_conversation(alice_client, alice, notebook):
    response = alice_client.post(f"/notebooks/{notebook.pk}/chats/")
    conversation = Conversation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/chats/{conversation.pk}/"
    assert (conversation.owner, conversation.notebook, conversation.note) == (alice, notebook, None)
    page = html_of(alice_client.get(response["Location"]))
    assert "About TeX" in page
    assert "Ask your first question." in page


def test_ask_about_a_notes_pdfs_starts_a_conversation_about_that_note(alice_client, note):
    response = alice_client.post(f"/notes/{note.pk}/chats/")
    conversation = Conversation.objects.get()
    assert response["Location"] == f"/chats/{conversation.pk}/"
    assert conversation.note == note
    assert "About the PDFs of “URLs in LaTeX”" in html_of(alice_client.get(response["Location"]))


def test_a_trashed_note_gets_no_new_conversation(alice_client, note):
    from notes.services import note_trash

    note_trash(note=note)
    response = alice_client.post(f"/notes/{note.pk}/chats/")
    assert response["Location"] == f"/notes/{note.pk}/"
    assert not Conversation.objects.exists()


def test_lists_show_an_empty_state_then_the_conversations(alice_client, alice, notebook, note):
    empty = html_of(alice_client.get(f"/notebooks/{notebook.pk}/chats/"))
    assert "No conversations yet." in empty
    whole = services.conversation_create(owner=alice, notebook=notebook, title="Whole book")
    about_note = services.conversation_create(owner=alice, notebook=notebook, note=note)
    services.message_ask(conversation=whole, content="What is in here?")

    listed = html_of(alice_client.get(f"/notebooks/{notebook.pk}/chats/"))
    assert "No conversations yet." not in listed
    assert listed.index("Whole book") < listed.index("About URLs in LaTeX")
    assert "2 messages" in listed
    on_note = html_of(alice_client.get(f"/notes/{note.pk}/chats/"))
    assert f'id="conversation-{about_note.pk}"' in on_note
    assert f'id="conversation-{whole.pk}"' not in on_note
    assert "Ask about this note’s PDFs" in on_note


def test_rename_in_place_with_htmx(alice_client, conversation):
    url = f"/chats/{conversation.pk}/rename/"
    form = html_of(alice_client.get(url, headers={"HX-Request": "true"}))
    assert form.lstrip().startswith(
        f'<li class="card conversation-row" id="conversation-{conversation.pk}"'
    )
    assert 'value="About URLs in LaTeX"' in form

    row = html_of(alice_client.post(url, {"title": "Colons"}, headers={"HX-Request": "true"}))
    assert row.lstrip().startswith("<li")
    assert ">Colons</a>" in row
    assert "0 messages" in row
    conversation.refresh_from_db()
    assert conversation.title == "Colons"

    cancelled = html_of(alice_client.get(url, {"cancel": "1"}, headers={"HX-Request": "true"}))
    assert ">Colons</a>" in cancelled

    refused = html_of(alice_client.post(url, {"title": "   "}, headers={"HX-Request": "true"}))
    assert "<form" in refused
    conversation.refresh_from_db()
    assert conversation.title == "Colons"


def test_rename_without_javascript(alice_client, conversation):
    url = f"/chats/{conversation.pk}/rename/"
    assert "<h1>Rename conversation</h1>" in html_of(alice_client.get(url))
    response = alice_client.post(url, {"title": "Colons"})
    assert response["Location"] == f"/chats/{conversation.pk}/"
    conversation.refresh_from_db()
    assert conversation.title == "Colons"


def test_delete_asks_first(alice_client, conversation, note):
    url = f"/chats/{conversation.pk}/delete/"
    confirm = html_of(alice_client.get(url))
    assert "Delete “About URLs in LaTeX”?" in confirm
    assert Conversation.objects.exists()
    response = alice_client.post(url)
    assert response["Location"] == f"/notes/{note.pk}/chats/"
    assert not Conversation.objects.exists()


def test_delete_from_the_list_with_htmx(alice_client, alice, notebook):
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    listed = html_of(alice_client.get(f"/notebooks/{notebook.pk}/chats/"))
    assert f'hx-post="/chats/{conversation.pk}/delete/"' in listed
    assert "hx-confirm=" in listed
    response = alice_client.post(
        f"/chats/{conversation.pk}/delete/", headers={"HX-Request": "true"}
    )
    assert (response.status_code, response.content) == (200, b"")
    assert not Conversation.objects.exists()


# --- the conversation page --------------------------------------------------------------------


def test_the_page_connects_its_socket_without_inline_scripts(alice_client, conversation):
    page = html_of(alice_client.get(f"/chats/{conversation.pk}/"))
    assert 'hx-ext="ws"' in page
    assert f'ws-connect="/ws/chat/{conversation.pk}/"' in page
    assert "django_htmx/ext/hx-ws-2" in page
    assert "js/chat.js" in page
    # Every <script> loads a file: a strict CSP (script-src 'self') holds. Data for the
    # scripts (json_script: the composer's selection) is JSON, which never runs.
    for attributes, tag in re.findall(r"<script([^>]*)>(.*?)</script>", page, flags=re.S):
        assert tag.strip() == "" or 'type="application/json"' in attributes
    assert not re.search(r"<[^>]*\son[a-z]+=", page)  # no inline event handlers either
    form = re.search(r'<form id="ask-form".*?</form>', page, flags=re.S)
    assert form is not None
    assert "ws-send" in form.group(0)
    assert f'action="/chats/{conversation.pk}/ask/"' in form.group(0)
    assert "csrfmiddlewaretoken" in form.group(0)


def test_a_saved_answer_shows_as_it_was_saved(alice_client, conversation):
    answer = answered(
        conversation,
        "Breaks between colons are **not allowed** [1]. Slashes are fine [2].",
        citations=[citation(1)],
        confidence="high",
        follow_ups=["What about slashes?", 'Quotes "inside" <b>tags</b>?'],
        metadata={"unverified_citations": 1, "abstained": False},
        answerer="extractive",
    )
    page = html_of(alice_client.get(f"/chats/{conversation.pk}/"))
    assert page.index("What about colons?") < page.index("<strong>not allowed</strong>")
    assert f'id="message-{answer.pk}"' in page
    assert 'class="message message-assistant status-complete"' in page
    # [1] is verified: a chip with file, page and quote that opens the PDF at the page.
    assert page.count('data-testid="citation-chip"') == 1
    assert 'href="/attachments/41/file/#page=3"' in page
    assert "url.pdf, page 3" in page
    assert "Breaks are not allowed between colons." in page
    assert (
        "/attachments/41/pages/?page=3&amp;quote=Breaks+are+not+allowed+between+colons.#quote"
        in page
    )
    # [2] is not: plain muted text.
    assert '<span class="cite-unverified"' in page
    assert ">[2]</span>" in page
    assert "1 citation could not be verified" in page
    # An extractive answer's score is a match of words and meaning, not a verdict.
    assert "Close match" in page
    assert "High confidence" not in page
    assert "Extractive answer" in page
    assert page.count('data-testid="follow-up"') == 2
    assert 'name="content" value="What about slashes?"' in page
    assert "Quotes &quot;inside&quot; &lt;b&gt;tags&lt;/b&gt;?" in page
    assert "data-poll" not in page
    # The partial the page polls with is the same.
    partial = html_of(alice_client.get(f"/chats/messages/{answer.pk}/"))
    assert partial.count('data-testid="citation-chip"') == 1


def test_a_model_answer_is_not_labelled_extractive(alice_client, conversation):
    answered(conversation, "Plain.", answerer="llm", confidence="low")
    page = html_of(alice_client.get(f"/chats/{conversation.pk}/"))
    assert "Extractive answer" not in page
    assert "Low confidence" in page


HOSTILE = """Look [1].

<script>alert("md")</script>
<img src=x onerror="alert('img')">
[click](javascript:alert('link'))
[titled](https://example.com "see [1]")
![pixel](https://tracker.example/p.png)
`code [1]` and <a href="https://evil.example" onclick="steal()">raw</a>

    indented [1] code
"""


def test_hostile_markdown_in_an_answer_is_sanitized(alice_client, conversation):
    answered(
        conversation, HOSTILE, citations=[citation(1)], metadata={"links": ["https://example.com"]}
    )
    page = html_of(alice_client.get(f"/chats/{conversation.pk}/"))
    answer = re.search(r'<div class="markdown answer"[^>]*>(.*?)</div>\s*<ol', page, flags=re.S)
    assert answer is not None
    html = answer.group(1)
    # Every "<" left is a tag we allow (the rest became text), none with a handler or a
    # script URL, and the raw HTML shows as text.
    tags = re.findall(r"<(/?[a-z0-9]+)([^>]*)>", html)
    assert {name.lstrip("/") for name, _ in tags} <= {"p", "a", "span", "q", "code", "pre"}
    for _, attributes in tags:
        assert not re.search(r"\son[a-z]+\s*=", attributes)
        assert "javascript:" not in attributes
        assert "evil.example" not in attributes
    assert '&lt;script&gt;alert("md")&lt;/script&gt;' in html
    assert "&lt;img src=x onerror=" in html
    # The chip goes into text only: not into a link title, not into code.
    assert html.count('data-testid="citation-chip"') == 1
    assert 'title="see [1]"' in html
    assert "<code>code [1]</code>" in html
    assert "indented [1] code" in html


def test_citation_chips_only_for_verified_citations(alice_client, conversation):
    answered(
        conversation,
        "First [1], second [2], third [3], again [1].",
        citations=[citation(1), citation(3, page=9, quote="Another sentence.")],
    )
    page = html_of(alice_client.get(f"/chats/{conversation.pk}/"))
    chips = re.findall(r'data-testid="citation-chip">(\d+)</a>', page)
    assert chips == ["1", "3", "1"]
    assert 'href="/attachments/41/file/#page=9"' in page
    assert page.count('class="cite-unverified"') == 1
    assert page.count('data-testid="source"') == 2


def test_a_note_citation_links_to_the_note(alice_client, conversation, note):
    cited = {"n": 1, "kind": "note", "note_id": note.pk, "note_title": note.title,
             "quote": "Colons and slashes."}  # fmt: skip
    answered(conversation, "From the note [1].", citations=[cited])
    page = html_of(alice_client.get(f"/chats/{conversation.pk}/"))
    assert f'href="/notes/{note.pk}/"' in page
    assert 'data-testid="citation-chip"' in page


@pytest.mark.parametrize(
    ("status", "error", "shown"),
    [
        ("error", "The model was down.", "The model was down."),
        ("interrupted", "", "This answer was interrupted before it was finished."),
    ],
)
def test_a_failed_answer_offers_a_retry(alice_client, conversation, status, error, shown):
    answer = answered(conversation, "Half an ans", status=status, error=error)
    page = html_of(alice_client.get(f"/chats/{conversation.pk}/"))
    assert shown in page
    assert f'action="/chats/messages/{answer.pk}/retry/"' in page
    assert 'name="action" value="retry"' in page
    assert ">Retry</button>" in page
    assert "Close match" not in page


def test_an_answer_being_written_shows_its_text_so_far_and_polls(alice_client, conversation):
    answer = answered(
        conversation,
        "Breaks between <colons>",
        status=Message.Status.STREAMING,
        tool_calls=[{"name": "document_search", "summary": "Searching documents for ‘colons’"}],
    )
    page = html_of(alice_client.get(f"/chats/{conversation.pk}/"))
    assert "Still being written…" in page
    assert f'id="message-{answer.pk}-text"' in page
    assert "Breaks between &lt;colons&gt;" in page
    assert f'hx-get="/chats/messages/{answer.pk}/"' in page
    assert 'hx-trigger="every 1s, chat:refresh"' in page
    assert '<noscript><meta http-equiv="refresh" content="3"></noscript>' in page
    partial = html_of(alice_client.get(f"/chats/messages/{answer.pk}/"))
    assert "data-poll" in partial
    assert "Writing the answer…" in partial

    Message.objects.filter(pk=answer.pk).update(content="", status=Message.Status.PENDING)
    pending = html_of(alice_client.get(f"/chats/messages/{answer.pk}/"))
    assert "Searching documents for ‘colons’…" in pending

    Message.objects.filter(pk=answer.pk).update(content="Done.", status=Message.Status.COMPLETE)
    done = html_of(alice_client.get(f"/chats/messages/{answer.pk}/"))
    assert "data-poll" not in done
    assert "<p>Done.</p>" in done
    assert "noscript" not in html_of(alice_client.get(f"/chats/{conversation.pk}/"))


# --- the plain-form fallbacks -----------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "   ", "x" * (settings.CHAT_QUESTION_MAX_CHARS + 1)])
def test_the_fallback_refuses_an_empty_or_overlong_question(alice_client, conversation, content):
    response = alice_client.post(f"/chats/{conversation.pk}/ask/", {"content": content})
    page = html_of(response)
    assert 'data-testid="ask-error"' in page
    assert not Message.objects.exists()


def test_the_fallback_refuses_a_scope_with_nothing_to_search(alice_client, conversation):
    page = html_of(alice_client.post(f"/chats/{conversation.pk}/ask/", {"content": "Anything?"}))
    assert "There is nothing to search here yet" in page
    assert not Message.objects.exists()


def test_the_fallback_saves_the_question_and_starts_the_answer_on_commit(
    alice_client, alice, notebook, django_capture_on_commit_callbacks, monkeypatch
):
    from chat import runner

    started: list[tuple[int, int]] = []
    monkeypatch.setattr(
        runner, "start", lambda m, c, also=None, question_id=None: started.append((m, c))
    )
    conversation = services.conversation_create(owner=alice, notebook=notebook)
    NoteFactory.create(notebook=notebook, body="Colons break nothing.")
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(f"/chats/{conversation.pk}/ask/", {"content": " Colons? "})
    question, answer = Message.objects.order_by("pk")
    assert (question.content, answer.status) == ("Colons?", Message.Status.PENDING)
    assert response["Location"] == f"/chats/{conversation.pk}/#message-{answer.pk}"
    assert started == [(answer.pk, conversation.pk)]


def test_the_fallback_retries_a_failed_answer(
    alice_client, conversation, django_capture_on_commit_callbacks, monkeypatch
):
    from chat import runner

    started: list[int] = []
    monkeypatch.setattr(
        runner, "start", lambda m, c, also=None, question_id=None: started.append(m)
    )
    answer = answered(conversation, "", status=Message.Status.ERROR, error="down")
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(f"/chats/messages/{answer.pk}/retry/")
    assert response["Location"] == f"/chats/{conversation.pk}/#message-{answer.pk}"
    answer.refresh_from_db()
    assert (answer.status, answer.error) == (Message.Status.PENDING, "")
    assert started == [answer.pk]

    again = alice_client.post(f"/chats/messages/{answer.pk}/retry/", follow=True)
    assert "Only a failed, interrupted or cut-short answer can be retried." in html_of(again)
    assert started == [answer.pk]


@pytest.mark.django_db(transaction=True)
def test_without_the_socket_a_question_is_answered_and_the_page_polls_it(alice):
    """The whole fallback for real: a plain post, the extractive answerer in the runner's
    thread, the message partial polled until the answer is complete."""
    from tests.fixtures.documents import ingest, upload

    client = Client()
    client.force_login(alice)
    notebook = NotebookFactory.create(owner=alice, title="Tools")
    note = note_create(notebook=notebook, author=alice, title="Lantern manual")
    assert ingest(upload(alice, note, "manual.pdf")).status == "ready"
    conversation = services.conversation_create(owner=alice, notebook=notebook, note=note)

    response = client.post(f"/chats/{conversation.pk}/ask/", {"content": QUESTION})
    answer_id = int(response["Location"].rsplit("-", 1)[1])

    def finished() -> str:
        partial = html_of(client.get(f"/chats/messages/{answer_id}/"))
        return "" if "data-poll" in partial else partial

    partial = wait_until(finished, 60, interval=0.2, message="the answer is still polled")
    assert "status-complete" in partial
    assert "every link points to a page that exists" in partial
    assert 'data-testid="citation-chip"' in partial
    assert "Extractive answer" in partial


# --- another user -----------------------------------------------------------------------------


@pytest.fixture
def bob_client(bob) -> Client:
    client = Client()
    client.force_login(bob)
    return client


def test_bob_gets_404_on_every_chat_page_and_action(bob_client, alice, notebook, note):
    conversation = services.conversation_create(owner=alice, notebook=notebook, note=note)
    answer = answered(conversation, "Secret [1].", citations=[citation(1)], status="error")
    c, m = conversation.pk, answer.pk
    routes = [
        ("get", f"/notebooks/{notebook.pk}/chats/", {}),
        ("post", f"/notebooks/{notebook.pk}/chats/", {}),
        ("get", f"/notes/{note.pk}/chats/", {}),
        ("post", f"/notes/{note.pk}/chats/", {}),
        ("get", f"/chats/{c}/", {}),
        ("post", f"/chats/{c}/ask/", {"content": "pwned"}),
        ("get", f"/chats/{c}/rename/", {}),
        ("post", f"/chats/{c}/rename/", {"title": "pwned"}),
        ("get", f"/chats/{c}/delete/", {}),
        ("post", f"/chats/{c}/delete/", {}),
        ("get", f"/chats/messages/{m}/", {}),
        ("post", f"/chats/messages/{m}/retry/", {}),
        ("get", f"/chats/messages/{answer.reply_to_id}/", {}),
    ]
    for method, url, data in routes:
        for headers in ({}, {"HX-Request": "true"}):
            response = getattr(bob_client, method)(url, data, headers=headers)
            assert response.status_code == 404, (method, url, headers)
            assert b"Secret" not in response.content
    conversation.refresh_from_db()
    answer.refresh_from_db()
    assert conversation.title == "About URLs in LaTeX"
    assert (answer.status, Message.objects.count()) == ("error", 2)
    assert Conversation.objects.count() == 1


def test_anonymous_visitors_are_sent_to_log_in(anon_client, conversation):
    for url in (f"/chats/{conversation.pk}/", f"/notes/{conversation.note_id}/chats/"):
        response = anon_client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")
    assert anon_client.post(f"/chats/{conversation.pk}/ask/", {"content": "hi"}).status_code == 302
    assert not Message.objects.exists()
