"""Bad input gets a clear 4xx, never a 500: every page route and API operation, called by a
user who owns what its path names, with

- C0 control characters (NUL and the others but tab, newline and carriage return) in the query
  string, in form fields and in JSON bodies: 400, whatever the route;
- numbers no id or count can be (2**63 and 2**64, past PostgreSQL's bigint; -1 and 0; Unicode
  digits, which `str.isdigit()` accepts; thousands of digits, which `int()` refuses) in every
  id of the path, and in every id and number of the query string and body (page, c,
  conversation, note, notebook, limit, offset, `*_id`…): 4xx where the route reads them, and
  never 5xx where it does not.

Like tests/test_isolation.py it walks what tests/routes.py enumerates, so a new page or endpoint
is checked without being listed here. Requests go through `Client(raise_request_exception=False)`,
so a crash shows as the 500 a user would get.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from accounts.services import api_token_create
from chat.models import Conversation, Memory, Message
from intelligence.models import SourceProfile
from notes.models import Note
from notes.services import membership_add, note_create, notebook_create
from studio.models import StudioOutput
from tests.factories import UserFactory
from tests.fixtures.documents import upload
from tests.routes import (
    VERBS,
    accepted_methods,
    api_body_schema,
    api_operation,
    api_operations,
    app_patterns,
)

pytestmark = pytest.mark.django_db

CONTROLS = ["\x00", "\x01", "\x08", "\x0e", "\x1b", "\x1f"]
NUMBERS = [str(2**63), str(2**64), "-1", "0", "²", "١٢", "9" * 5000]
ALONE = [str(2**63), "²"]  # tried in each field alone too (the others may end a request early)
# Query and form names the pages read as ids or numbers (and `q`, which some read beside them).
NUMBER_FIELDS = ("page", "c", "conversation", "note", "notebook", "file", "message_id", "q")
# Text fields the page forms take, for the control-character checks and as a form's body.
FORM = {"title": "t", "body": "b", "description": "d", "password": "x", "content": "c?",
        "name": "n", "mode": "exploring", "selections": "", "excluded": ""}  # fmt: skip


@pytest.fixture
def mine(alice) -> dict[str, int]:
    """One of each kind of object a route names, all Alice's, by kind."""
    notebook = notebook_create(owner=alice, title="Alice's")
    note = note_create(notebook=notebook, author=alice, title="Alice's note", body="hers")
    attachment = upload(alice, note, "locked.pdf")
    conversation = Conversation.objects.create(owner=alice, notebook=notebook, note=note)
    Message.objects.create(conversation=conversation, role="user", content="a question")
    answer = Message.objects.create(
        conversation=conversation, role="assistant", content="an answer", status="error"
    )
    memory = Memory.objects.create(owner=alice, notebook=notebook, kind="fact", text="hers")
    token, _ = api_token_create(user=alice, name="script")
    SourceProfile.objects.create(
        attachment=attachment, doc_type="receipt", better_name="Her receipt", status="ready"
    )
    output = StudioOutput.objects.create(notebook=notebook, created_by=alice, kind="quiz")
    member = UserFactory.create(username="mona")  # the sharing pages name a member
    membership_add(notebook=notebook, by=alice, identifier="mona", role="viewer")
    return {
        "notebook": notebook.pk,
        "note": note.pk,
        "attachment": attachment.pk,
        "conversation": conversation.pk,
        "message": answer.pk,
        "memory": memory.pk,
        "output": output.pk,
        "token": token.pk,
        "member": member.pk,
        "user": member.pk,  # a hand-over's `user_id`
        # A password-reset link's user (its token: the one above; neither is valid).
        "uidb64": alice.pk,
    }


def _client(alice, token: str = "") -> Client:
    """Alice's browser, or with `token` her script. A script asks for Server-Sent Events: a
    question asked through the API otherwise waits for its answer, which no worker writes
    here."""
    if token:
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        return Client(raise_request_exception=False, headers=headers)
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    return client


def _page_url(name: str, ids: dict[str, int], replace: str | None = None) -> str:
    """The route's URL naming `ids` by kind (`<int:note_id>`: ids["note"]), or with `replace`
    standing for every id of its path."""
    converters = app_patterns()[name].pattern.converters
    if not converters:
        return reverse(name)
    marker = 987654321
    kwargs = {kwarg: marker if replace else ids[kwarg.removesuffix("_id")] for kwarg in converters}
    url = reverse(name, kwargs=kwargs)
    return url.replace(str(marker), quote(replace)) if replace else url


def _page_request(
    client: Client,
    method: str,
    url: str,
    query: dict[str, str],
    form: dict[str, str],
    headers: dict[str, str],
) -> Any:
    if query:
        url = f"{url}?{urlencode(query)}"
    if method == "GET":
        return client.get(url, headers=headers)
    body = urlencode(form)
    return client.generic(
        method, url, body, content_type="application/x-www-form-urlencoded", headers=headers
    )


def _said(method: str, headers: dict[str, str], sent: dict[str, str], status: int) -> str:
    """One wrong answer, short: `POST htmx title='a\\x00b' -> 500`."""
    shown = " ".join(f"{k!r:.24}={v!r:.24}" for k, v in sent.items())
    return f"{method}{' htmx' if headers else ''} {shown} -> {status}"


def _summary(where: str, wrong: list[str]) -> str:
    crashes = sum(w.endswith("-> 500") for w in wrong)
    return f"{where}: {len(wrong)} wrong, {crashes} of them 500: " + "; ".join(wrong[:4])


PAGES = sorted(app_patterns())


@pytest.mark.parametrize("name", PAGES)
def test_control_characters_in_a_page_request_answer_400(name, alice, mine):
    client = _client(alice)
    url = _page_url(name, mine)
    wrong = []
    for method in sorted(accepted_methods(app_patterns()[name])):
        for char in CONTROLS:
            text = f"a{char}b"
            for headers in ({}, {"HX-Request": "true"}):
                tries = [({"q": text}, FORM), ({text: "1"}, FORM)]
                if method == "POST":  # (Django reads a form only from a POST)
                    tries += [({}, {**FORM, field: text}) for field in ("title", "content")]
                for query, form in tries:
                    response = _page_request(client, method, url, query, form, headers)
                    if response.status_code != 400:
                        sent = query or {k: v for k, v in form.items() if v == text}
                        wrong.append(_said(method, headers, sent, response.status_code))
    assert not wrong, _summary(url, wrong)


@pytest.mark.parametrize("name", PAGES)
def test_hostile_numbers_in_a_page_path_answer_404(name, alice, mine):
    if not app_patterns()[name].pattern.converters:
        pytest.skip("no id in its path")
    client = _client(alice)
    wrong = []
    for number in NUMBERS:
        url = _page_url(name, mine, replace=number)
        for method in VERBS:
            response = _page_request(client, method, url, {}, FORM, {})
            if response.status_code not in (404, 405):
                wrong.append(_said(method, {}, {"path": number}, response.status_code))
    assert not wrong, _summary(name, wrong)


@pytest.mark.parametrize("name", PAGES)
def test_hostile_numbers_in_a_page_query_or_form_never_answer_500(name, alice, mine):
    """All id and number fields at once, and each alone, in the query string and in the form:
    the route reads what it reads, and answers below 500."""
    client = _client(alice)
    url = _page_url(name, mine)
    wrong = []
    tries = [dict.fromkeys(NUMBER_FIELDS, number) for number in NUMBERS]
    tries += [{field: number} for number in ALONE for field in NUMBER_FIELDS]
    for method in sorted(accepted_methods(app_patterns()[name])):
        for values in tries:
            for query, form in ((values, FORM), ({}, {**FORM, **values})):
                if method == "GET" and not query:
                    continue
                response = _page_request(client, method, url, query, form, {})
                if response.status_code >= 500:
                    wrong.append(_said(method, {}, values, response.status_code))
    assert not wrong, _summary(url, wrong)


# Form fields holding JSON text: an escape ("\u0000") passes the form's own checks, and
# PostgreSQL cannot store the NUL it decodes to.
JSON_IN_FORMS = {
    "extracted": '{"merchant": "a\\u0000b"}',
    "selections": '[{"kind": "file", "ref": "note:1", "name": "a\\u0000b"}]',
    "excluded": '["note:1\\u0000"]',
}


@pytest.mark.parametrize("name", PAGES)
def test_escaped_control_characters_in_json_form_fields_never_answer_500(name, alice, mine):
    if "POST" not in accepted_methods(app_patterns()[name]):
        pytest.skip("no form")
    client = _client(alice)
    url = _page_url(name, mine)
    form = {**FORM, "doc_type": "receipt", "better_name": "x", **JSON_IN_FORMS}
    for headers in ({}, {"HX-Request": "true"}):
        response = _page_request(client, "POST", url, {}, form, headers)
        assert response.status_code < 500, (headers, response.status_code)


# Pages that read an id from their query string or form: a hostile one is a clear 4xx where a
# wrong id is (404: no such thing; 400: choose again), and no filter where an unreadable one
# already meant none (200).
READERS: list[tuple[str, str, str, str, set[int]]] = [
    # (route, method, query or form, field, statuses)
    ("chat:mentions", "GET", "query", "notebook", {404}),
    ("workspace:page", "GET", "query", "c", {404}),
    ("chat:save", "POST", "form", "note", {400, 302}),  # htmx; else back, with a message
    ("attachments:notebook_upload", "POST", "form", "note", {400}),
    ("search:search", "GET", "query", "notebook", {200}),
    ("search:search", "GET", "query", "note", {200}),
    ("search:search", "GET", "query", "file", {200}),
    ("guides:source_guide", "GET", "query", "conversation", {200}),
    ("guides:notebook_guide", "GET", "query", "conversation", {200}),
]


@pytest.mark.parametrize(("name", "method", "where", "field", "statuses"), READERS)
def test_hostile_ids_where_a_page_reads_them_answer_4xx(
    name, method, where, field, statuses, alice, mine
):
    client = _client(alice)
    url = _page_url(name, mine)
    for number in NUMBERS:
        for headers in ({}, {"HX-Request": "true"}):
            values = {field: number}
            query, form = (values, {}) if where == "query" else ({}, {**FORM, **values})
            if name == "attachments:notebook_upload":
                response = client.post(
                    url, {**form, "files": _pdf()}, headers={**headers, "X-Upload": "1"}
                )
            else:
                response = _page_request(client, method, url, query, form, headers)
            assert response.status_code in statuses, (number[:20], headers, response.status_code)


def test_page_reader_table_names_real_routes():
    assert {name for name, *_ in READERS} <= set(app_patterns())


def test_whitespace_controls_still_pass(alice, alice_token, mine):
    """Tab, line feed, vertical tab, form feed and carriage return are text (a text file made
    a note keeps its form feeds, and editing it must still save)."""
    client = _client(alice)
    body = "one\r\ntwo\n\x0cpage two\x0b."
    response = client.post(f"/notes/{mine['note']}/edit/", {"title": "A\ttitle", "body": body})
    assert response.status_code == 302
    assert Note.objects.get(pk=mine["note"]).body == body
    assert client.get("/search/", {"q": "two\tlines\r\nhere\x0c"}).status_code == 200
    api = _client(alice, alice_token)
    patch = json.dumps({"body": body})
    response = api.patch(f"/api/notes/{mine['note']}", patch, content_type="application/json")
    assert response.status_code == 200


def test_the_page_refusal_is_readable_and_translated(alice, mine):
    client = _client(alice)
    page = client.get("/search/", {"q": "a\x00b"}, headers={"Accept-Language": "de"})
    assert page.status_code == 400
    assert page["Content-Type"].startswith("text/html")
    html = page.content.decode()
    assert 'id="error-title"' in html
    assert "Steuerzeichen" in html
    fragment = client.get("/search/", {"q": "a\x00b"}, headers={"HX-Request": "true"})
    assert fragment.status_code == 400
    assert b"<html" not in fragment.content
    assert b"control character" in fragment.content


# --- API --------------------------------------------------------------------------------------

OPERATIONS = sorted(api_operations())


def _pdf() -> SimpleUploadedFile:
    from tests.fixtures.documents import sample

    return SimpleUploadedFile("mine.pdf", sample("text.pdf"), "application/pdf")


def _integer(schema: dict[str, Any]) -> bool:
    """Whether an OpenAPI schema is an integer, a list of them, or either or null."""
    options = schema.get("anyOf", [schema])
    return any(
        option.get("type") == "integer"
        or (option.get("type") == "array" and option.get("items", {}).get("type") == "integer")
        for option in options
    )


def _accepts(schema: dict[str, Any], number: str) -> bool:
    """Whether an integer parameter takes `number` as a valid value (an offset of 0)."""
    if not re.fullmatch(r"-?[0-9]{1,19}", number):
        return False
    options: list[dict[str, Any]] = schema.get("anyOf", [schema])
    bounds = next((o for o in options if o.get("type") == "integer"), {})
    low, high = bounds.get("minimum", -(2**63)), bounds.get("maximum", 2**63 - 1)
    return bool(low <= int(number) <= high)


def _api_url(path: str, ids: dict[str, int], replace: str | None = None) -> str:
    return re.sub(
        r"\{(\w+)_id\}", lambda m: quote(replace) if replace else str(ids[m.group(1)]), path
    )


def _valid_body(method: str, path: str, ids: dict[str, int]) -> dict[str, Any]:
    """The fields the body requires, valid (Alice's notebook), so that a hostile one is what
    fails."""
    schema = api_body_schema(method, path)
    body: dict[str, Any] = {}
    for name in schema.get("required", []):
        kind = schema["properties"][name]
        if name.endswith("_id"):
            body[name] = ids[name.removesuffix("_id")]
        elif kind.get("type") == "string" and kind.get("format") != "binary":
            body[name] = "x"
    return body


def _api_request(
    client: Client, method: str, url: str, query: dict[str, Any], body: dict[str, Any] | str
) -> Any:
    if query:
        url = f"{url}?{urlencode(query, doseq=True)}"
    if _is_upload(method, url.split("?")[0]):
        fields = body if isinstance(body, dict) else {}
        return client.post(url, {"files": [_pdf()], **fields})
    text = body if isinstance(body, str) else json.dumps(body)
    return client.generic(method, url, text, content_type="application/json")


def _is_upload(method: str, path: str) -> bool:
    return method == "POST" and path.endswith("/attachments")


def _json_number(value: str) -> str:
    """`value` as it goes into a JSON body: a number when it is one, else a string."""
    return value if re.fullmatch(r"-?[0-9]+", value) else json.dumps(value)


def _json(response: Any) -> dict[str, Any]:
    if not response.get("Content-Type", "").startswith("application/json"):
        return {}
    return dict(response.json())


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_control_characters_in_an_api_request_answer_400(method, path, alice, alice_token, mine):
    client = _client(alice, alice_token)
    url = _api_url(path, mine)
    body = _valid_body(method, path, mine)
    wrong = []
    for char in CONTROLS:
        text = f"a{char}b"
        tries: list[tuple[dict[str, Any], dict[str, Any] | str]] = [
            ({"q": text}, body),
            ({text: "1"}, body),
        ]
        if _is_upload(method, path):
            # (Django itself strips the non-printable characters of a file's name.)
            tries += [({}, {"comment": text}), ({}, {text: "a key"})]
        elif method != "GET":
            strings = [k for k, v in body.items() if isinstance(v, str)] or ["title"]
            tries += [({}, {**body, key: text}) for key in strings]
            tries.append(({}, {**body, "nested": [{"deep": text}]}))
            tries.append(({}, {**body, text: "a key"}))
        for query, sent in tries:
            response = _api_request(client, method, url, query, sent)
            if response.status_code != 400 or "detail" not in _json(response):
                shown = query or {"body": json.dumps(sent)}
                wrong.append(_said(method, {}, shown, response.status_code))
    assert not wrong, _summary(f"{method} {path}", wrong)


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_hostile_numbers_in_an_api_request_answer_4xx(method, path, alice, alice_token, mine):
    """In the path's ids, and in every integer of the query string and body."""
    client = _client(alice, alice_token)
    operation = api_operation(method, path)
    body = _valid_body(method, path, mine)
    base_query = {p["name"]: "x" for p in operation.get("parameters", [])
                  if p["in"] == "query" and p.get("required")}  # fmt: skip
    schemas = {p["name"]: p["schema"] for p in operation.get("parameters", [])}
    integers_in_query = [p["name"] for p in operation.get("parameters", [])
                         if p["in"] == "query" and _integer(p["schema"])]  # fmt: skip
    properties = api_body_schema(method, path).get("properties", {})
    integers_in_body = [name for name, schema in properties.items() if _integer(schema)]
    wrong = []
    for number in NUMBERS:
        tries: list[tuple[str, dict[str, Any], dict[str, Any] | str]] = []
        if "{" in path:
            tries.append((_api_url(path, mine, replace=number), base_query, body))
        url = _api_url(path, mine)
        for name in integers_in_query:
            if not _accepts(schemas[name], number):
                tries.append((url, {**base_query, name: number}, body))
        for name in integers_in_body:
            items = [f'"{k}": {json.dumps(v)}' for k, v in body.items() if k != name]
            value = _json_number(number)
            if properties[name].get("anyOf", [{}])[0].get("type") == "array":
                value = f"[{value}]"
            tries.append((url, base_query, "{" + ", ".join([*items, f'"{name}": {value}']) + "}"))
        for url_, query, sent in tries:
            response = _api_request(client, method, url_, query, sent)
            if not 400 <= response.status_code < 500:
                shown = {"url": url_, **query, "body": str(sent)}
                wrong.append(_said(method, {}, shown, response.status_code))
    assert not wrong, _summary(f"{method} {path}", wrong)


def test_api_pagination_is_capped(alice, alice_api, mine):
    for query in ({"offset": 2**63}, {"limit": 2**63}, {"limit": 0}, {"offset": -1}):
        response = alice_api.get("/api/notebooks", query)
        assert response.status_code == 422, (query, response.status_code)
    assert alice_api.get("/api/notebooks", {"offset": 0, "limit": 100}).json()["count"] == 1
