"""The interface speaks the browser's language (German, Simplified Chinese, else English), a
choice in Settings → Language overrides it, and the scripts get their texts from the JavaScript
catalogue. The API stays English: scripts match its texts."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client

from notes import services as note_services
from tests.factories import NotebookFactory, NoteFactory


def _page(client: Client, url: str, language: str) -> str:
    response = client.get(url, HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_login_page_in_german(anon_client):
    html = _page(anon_client, "/accounts/login/", "de-DE,de;q=0.9,en;q=0.5")
    assert '<html lang="de">' in html
    assert "<h1>Anmelden</h1>" in html
    assert "Zum Inhalt springen" in html
    assert "Noch kein Konto?" in html
    assert "Log in" not in html


@pytest.mark.django_db
def test_login_page_in_simplified_chinese(anon_client):
    html = _page(anon_client, "/accounts/login/", "zh-CN,zh;q=0.9")
    assert '<html lang="zh-hans">' in html
    assert "<h1>登录</h1>" in html
    assert "跳到内容" in html
    assert "Log in" not in html


def test_notebook_list_in_german(alice, alice_client):
    notebook = note_services.notebook_create(owner=alice, title="Lektüre")
    for title in ("Eins", "Zwei"):
        note_services.note_create(notebook=notebook, author=alice, title=title)
    html = _page(alice_client, "/", "de")
    assert '<html lang="de">' in html
    assert "<h1>Deine Notizbücher</h1>" in html
    assert "Notizbuch anlegen" in html
    assert "2 Notizen" in html  # the plural form
    assert "Abmelden" in html


def test_notebook_list_in_simplified_chinese(alice, alice_client):
    html = _page(alice_client, "/", "zh-hans")
    assert '<html lang="zh-hans">' in html
    assert "<h1>你的笔记本</h1>" in html
    assert "创建笔记本" in html
    assert "还没有笔记本。" in html


def test_english_stays_the_default(alice, alice_client):
    html = _page(alice_client, "/", "fr-FR,fr;q=0.9")  # a language we do not have
    assert '<html lang="en">' in html
    assert "<h1>Your notebooks</h1>" in html


def test_messages_from_python_are_translated(alice, alice_client):
    notebook = NotebookFactory.create(owner=alice, title="Lektüre")
    note = NoteFactory.create(notebook=notebook, author=alice, title="Kapitel 1")
    response = alice_client.post(
        f"/notes/{note.pk}/trash/",
        {"from": "notebook"},
        HTTP_HX_REQUEST="true",
        HTTP_ACCEPT_LANGUAGE="de",
    )
    assert response.status_code == 200
    assert "„Kapitel 1“ wurde in den Papierkorb verschoben." in response.content.decode()


@pytest.mark.django_db
def test_set_language_overrides_the_browser(anon_client):
    english = _page(anon_client, "/accounts/login/", "en")
    assert "<h1>Log in</h1>" in english
    response = anon_client.post(
        "/i18n/setlang/",
        {"language": "de", "next": "/accounts/login/"},
        HTTP_ACCEPT_LANGUAGE="en",
    )
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/"
    html = _page(anon_client, "/accounts/login/", "en")
    assert '<html lang="de">' in html
    assert "<h1>Anmelden</h1>" in html
    assert "Noch kein Konto?" in html


@pytest.mark.django_db
def test_javascript_catalogue_for_anonymous_users(anon_client):
    response = anon_client.get("/jsi18n/", HTTP_ACCEPT_LANGUAGE="de")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/javascript")
    body = response.content.decode()
    assert '"Kopiert"' in body  # copy.js's "Copied"
    assert "django.gettext" in body


def test_base_page_loads_the_catalogue_before_the_page_scripts(alice_client):
    html = _page(alice_client, "/", "en")
    catalogue = html.index('<script src="/jsi18n/"></script>')
    assert catalogue < html.index("js/site.js")


def test_the_api_answers_in_english(alice_api):
    response = alice_api.post(
        "/api/notebooks",
        {"title": "   "},
        content_type="application/json",
        HTTP_ACCEPT_LANGUAGE="de",
    )
    assert response.status_code == 422
    assert response.json()["detail"] == "Give it a title."
    assert response["Content-Language"] == "en"


def test_catalogues_are_complete_and_compiled():
    call_command("compiletranslations", "--check")
