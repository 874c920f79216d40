"""The MCP server at /mcp, driven by the official MCP SDK's client (Streamable HTTP) against the
real application under daphne in a child process: tokens, their scopes, isolation, `ask`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from accounts.services import api_token_create, api_token_revoke
from attachments.models import NoteAttachment
from notes.services import membership_add, membership_remove, note_create, notebook_create
from tests.fixtures.documents import ingest, text_pdf, upload

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HERON = ["Heron Millpond Survey", "The grey heron nests beside the millpond every spring."]
KITCHEN = ["Kitchen Ledger", "The copper kettle was bought from the harbour market."]
BOB_CANARY = "zqxjmcpcanary"
TOOLS = {"document_search", "note_search", "note_read", "list_notebooks", "ask"}


def _application() -> Any:  # module level: the daphne child process calls it
    from channels.routing import get_default_application

    return get_default_application()


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker) -> Iterator[str]:
    """notebook.asgi (the application `manage.py serve` runs) under daphne."""
    from tests.daphne_server import start_daphne

    with django_db_blocker.unblock():
        daphne = start_daphne(_application)
    try:
        yield f"http://localhost:{daphne.port.value}"
    finally:
        daphne.terminate()
        daphne.join(10)


@pytest.fixture
def world(alice, bob) -> dict[str, Any]:
    garden = notebook_create(owner=alice, title="Garden")
    herons = note_create(notebook=garden, author=alice, title="Herons", body="Heron notes.")
    kitchen = notebook_create(owner=alice, title="Kitchen")
    pots = note_create(notebook=kitchen, author=alice, title="Pots", body="Kettle notes.")
    heron_pdf = ingest(upload(alice, herons, "herons.pdf", text_pdf(HERON)))
    kettle_pdf = ingest(upload(alice, pots, "kettle.pdf", text_pdf(KITCHEN)))
    bobs = notebook_create(owner=bob, title="Bob's vault")
    bobs_note = note_create(
        notebook=bobs, author=bob, title="Bob's note", body=f"{BOB_CANARY} heron millpond"
    )
    bobs_pdf = ingest(
        upload(bob, bobs_note, "bob.pdf", text_pdf([f"{BOB_CANARY} heron millpond spring."]))
    )
    assert {heron_pdf.status, kettle_pdf.status, bobs_pdf.status} == {"ready"}
    return {"alice": alice, "garden": garden, "herons": herons, "kitchen": kitchen, "pots": pots,
            "heron_pdf": heron_pdf, "kettle_pdf": kettle_pdf, "bobs_notebook": bobs,
            "bobs_note": bobs_note, "bobs_pdf": bobs_pdf}  # fmt: skip


def _session(server: str, token: str | None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=120)
    return Client(streamable_http_client(f"{server}/mcp", http_client=http))


def run(server: str, token: str | None, body: Callable[[Client], Awaitable[Any]]) -> Any:
    """Open one MCP session with `token` and run `body` in it."""

    async def go() -> Any:
        async with _session(server, token) as client:
            return await body(client)

    return anyio.run(go)


async def call(client: Client, name: str, **arguments: Any) -> tuple[bool, Any]:
    """(is_error, structured result or error text) of one tool call."""
    result = await client.call_tool(name, arguments)
    if result.is_error:
        text = " ".join(getattr(block, "text", "") for block in result.content)
        return True, text.removeprefix(f"Error executing tool {name}: ")
    return False, result.structured_content


def test_tools_answer_from_the_callers_sources_only(server, world):
    _, token = api_token_create(user=world["alice"], name="assistant")

    async def body(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {"tools": {t.name for t in (await client.list_tools()).tools}}
        out["notebooks"] = await call(client, "list_notebooks")
        out["search"] = await call(client, "document_search", query="grey heron millpond")
        out["in_garden"] = await call(
            client, "document_search", query="heron", notebook_id=world["garden"].pk
        )
        out["notes"] = await call(client, "note_search", query="kettle notes")
        out["read"] = await call(client, "note_read", note_id=world["herons"].pk)
        # Bob's ids, and his words.
        out["bobs_notebook"] = await call(
            client, "document_search", query="heron", notebook_id=world["bobs_notebook"].pk
        )
        out["bobs_note_docs"] = await call(
            client, "document_search", query="heron", note_id=world["bobs_note"].pk
        )
        out["bobs_note"] = await call(client, "note_read", note_id=world["bobs_note"].pk)
        out["missing_note"] = await call(client, "note_read", note_id=999_999)
        out["bobs_ask"] = await call(
            client, "ask", question="heron?", notebook_id=world["bobs_notebook"].pk
        )
        out["canary"] = await call(client, "document_search", query=f"{BOB_CANARY} heron")
        out["canary_notes"] = await call(client, "note_search", query=BOB_CANARY)
        # Bad input: a tool error that says what is wrong, never a crash.
        out["no_query"] = await call(client, "document_search", query="")
        out["bad_limit"] = await call(client, "document_search", query="heron", limit=99)
        out["bad_id"] = await call(client, "note_read", note_id="seven")
        return out

    out = run(server, token, body)
    assert out["tools"] == TOOLS
    error, notebooks = out["notebooks"]
    assert not error
    assert {nb["title"] for nb in notebooks["notebooks"]} == {"Garden", "Kitchen"}
    assert all(nb["url"].startswith(server + "/notebooks/") for nb in notebooks["notebooks"])

    error, found = out["search"]
    assert not error
    assert found["results"][0]["file"] == "herons.pdf"
    assert found["results"][0]["page"] == 1
    assert "grey heron nests" in found["results"][0]["text"]
    pdf = world["heron_pdf"]
    assert found["results"][0]["url"] == f"{server}/attachments/{pdf.pk}/file/#page=1"
    error, found = out["in_garden"]
    assert {r["file"] for r in found["results"]} == {"herons.pdf"}
    error, found = out["notes"]
    assert not error
    assert found["results"][0]["note_title"] == "Pots"
    error, note = out["read"]
    assert (note["title"], note["body"]) == ("Herons", "Heron notes.")

    assert out["bobs_notebook"] == out["bobs_ask"]
    assert out["bobs_notebook"][0]
    no_notebook = f"No notebook {world['bobs_notebook'].pk}. list_notebooks lists yours."
    assert out["bobs_notebook"][1] == no_notebook
    # Bob's note reads exactly like a note that does not exist.
    assert out["bobs_note"] == (True, f"No note {world['bobs_note'].pk}.")
    assert out["missing_note"] == (True, "No note 999999.")
    assert out["bobs_note_docs"] == (True, f"No note {world['bobs_note'].pk}.")
    for name in ("canary", "canary_notes"):
        error, found = out[name]
        assert not error
        assert BOB_CANARY not in str(found), name
        assert "Bob" not in str(found), name

    for name in ("no_query", "bad_limit", "bad_id"):
        error, text = out[name]
        assert error, name
        assert "validation error" in text, (name, text)
    assert "query\n  String should have at least 1 character" in out["no_query"][1]
    assert "limit\n  Input should be less than or equal to 10" in out["bad_limit"][1]
    assert "note_id\n  Input should be a valid integer" in out["bad_id"][1]


def test_without_a_valid_token_every_request_is_refused(server, world):
    for headers in ({}, {"Authorization": "Bearer nbk_wrong"}, {"Authorization": "Basic x"}):
        response = httpx2.post(
            f"{server}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={"Accept": "application/json, text/event-stream", **headers},
        )
        assert response.status_code == 401, headers
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert "Authorization: Bearer nbk_" in response.json()["error"]["message"]

    # The SDK's client, too, is refused with that message (before any tool is listed).
    with pytest.raises(BaseExceptionGroup) as refused:
        run(server, None, lambda client: client.list_tools())
    assert refused.group_contains(MCPError, match="^Authentication required")


def test_a_notebook_limited_token_sees_only_its_notebooks(server, world):
    _, token = api_token_create(
        user=world["alice"], name="garden only", notebook_ids=[world["garden"].pk]
    )

    async def body(client: Client) -> dict[str, Any]:
        return {
            "notebooks": await call(client, "list_notebooks"),
            "kettle": await call(client, "document_search", query="copper kettle harbour"),
            "kitchen": await call(
                client, "document_search", query="kettle", notebook_id=world["kitchen"].pk
            ),
            "pots": await call(client, "note_read", note_id=world["pots"].pk),
            "notes": await call(client, "note_search", query="kettle notes"),
        }

    out = run(server, token, body)
    assert [nb["title"] for nb in out["notebooks"][1]["notebooks"]] == ["Garden"]
    assert all(r["file"] != "kettle.pdf" for r in out["kettle"][1]["results"])
    no_notebook = f"No notebook {world['kitchen'].pk}. list_notebooks lists yours."
    assert out["kitchen"] == (True, no_notebook)
    assert out["pots"][0]
    assert all(r["note_title"] != "Pots" for r in out["notes"][1]["results"])

    # The REST API narrows the same way.
    api = httpx2.Client(base_url=server, headers={"Authorization": f"Bearer {token}"})
    assert [nb["title"] for nb in api.get("/api/notebooks").json()["items"]] == ["Garden"]
    assert api.get(f"/api/notebooks/{world['kitchen'].pk}").status_code == 404
    pdf = world["kettle_pdf"]
    assert api.get(f"/api/attachments/{pdf.pk}").status_code == 404


def test_a_read_only_token_reads_and_asks_but_cannot_write_through_the_api(server, world):
    _, token = api_token_create(user=world["alice"], name="reader", read_only=True)
    api = httpx2.Client(base_url=server, headers={"Authorization": f"Bearer {token}"})
    assert api.get("/api/notebooks").status_code == 200
    response = api.post("/api/notebooks", json={"title": "Written"})
    assert response.status_code == 403
    assert "read-only" in response.json()["detail"]
    assert api.delete(f"/api/notebooks/{world['garden'].pk}").status_code == 403
    assert world["alice"].notebooks.filter(title="Written").count() == 0
    assert world["alice"].notebooks.filter(pk=world["garden"].pk).exists()

    async def body(client: Client) -> tuple[bool, Any]:
        return await call(
            client, "document_search", query="grey heron", notebook_id=world["garden"].pk
        )

    error, found = run(server, token, body)
    assert not error
    assert found["results"][0]["file"] == "herons.pdf"


def test_a_revoked_token_is_refused_on_the_next_call_of_the_same_session(server, world):
    token_row, token = api_token_create(user=world["alice"], name="soon revoked")

    def revoke() -> None:
        try:
            api_token_revoke(token=token_row)
        finally:
            connection.close()  # this helper thread's, or the test database outlives the run

    async def body(client: Client) -> tuple[Any, BaseException | None]:
        first = await call(client, "list_notebooks")
        await sync_to_async(revoke)()
        try:
            await client.call_tool("list_notebooks", {})
        except MCPError as exc:
            return first, exc
        return first, None

    first, refused = run(server, token, body)
    assert not first[0]
    assert refused is not None
    assert "Authentication required" in str(refused)


def test_a_revoked_membership_is_nothing_on_the_next_call_of_the_same_session(server, world, bob):
    """Bob is a viewer of Alice's garden: through MCP he searches it and reads its note; once
    she revokes him, the next call of the same session finds nothing of it."""
    membership = membership_add(
        notebook=world["garden"], by=world["alice"], identifier="bob", role="viewer"
    )
    _, token = api_token_create(user=bob, name="bob's assistant")

    def revoke() -> None:
        try:
            membership_remove(membership=membership)
        finally:
            connection.close()  # this helper thread's, or the test database outlives the run

    async def body(client: Client) -> tuple[Any, ...]:
        garden = world["garden"].pk
        listed = await call(client, "list_notebooks")
        found = await call(client, "document_search", query="grey heron millpond",
                           notebook_id=garden)  # fmt: skip
        read = await call(client, "note_read", note_id=world["herons"].pk)
        await sync_to_async(revoke)()
        listed_after = await call(client, "list_notebooks")
        found_after = await call(client, "document_search", query="grey heron millpond",
                                 notebook_id=garden)  # fmt: skip
        read_after = await call(client, "note_read", note_id=world["herons"].pk)
        return listed, found, read, listed_after, found_after, read_after

    listed, found, read, listed_after, found_after, read_after = run(server, token, body)
    assert world["garden"].pk in {nb["id"] for nb in listed[1]["notebooks"]}
    assert "herons.pdf" in str(found[1])
    assert not read[0]
    assert "Heron notes." in str(read[1])
    assert world["garden"].pk not in {nb["id"] for nb in listed_after[1]["notebooks"]}
    for after in (found_after, read_after):
        assert "herons.pdf" not in str(after[1])
        assert "Heron notes." not in str(after[1])


def test_ask_answers_with_citations_quoted_from_the_source(server, world):
    _, token = api_token_create(user=world["alice"], name="asker", read_only=True)

    async def body(client: Client) -> dict[str, Any]:
        return {
            "answer": await call(
                client,
                "ask",
                question="Where does the grey heron nest?",
                notebook_id=world["garden"].pk,
            ),
            "which": await call(client, "ask", question="Where does the grey heron nest?"),
            "empty": await call(client, "ask", question="   ", notebook_id=world["garden"].pk),
        }

    out = run(server, token, body)
    error, answer = out["answer"]
    assert not error, answer
    assert answer["status"] == "complete", answer
    assert answer["citations"]
    pdf = NoteAttachment.objects.get(pk=world["heron_pdf"].pk)
    page_text = " ".join(pdf.pages.get(number=1).text.split())
    for citation in answer["citations"]:
        assert citation["file"] == "herons.pdf"
        assert citation["page"] == 1
        assert " ".join(citation["quote"].split()) in page_text
        assert citation["url"] == f"{server}/attachments/{pdf.pk}/file/#page=1"
    assert "millpond" in answer["answer"]
    # Kept in Alice's chat history, marked as asked over MCP.
    conversation = world["alice"].conversations.get()
    assert conversation.title == "MCP: Where does the grey heron nest?"
    assert answer["conversation_url"] == f"{server}/chats/{conversation.pk}/"
    # Two notebooks: which one must be said; an empty question is refused, nothing stored.
    which = "Say which notebook to ask (notebook_id): list_notebooks lists them."
    assert out["which"] == (True, which)
    assert out["empty"][0]
    assert world["alice"].conversations.count() == 1
