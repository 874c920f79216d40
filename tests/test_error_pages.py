"""The error pages look like the site and lead back into it, as a user sees them in production
(DEBUG=False): 404, 403, a CSRF failure, 400 and 500. 500.html is rendered by Django with no
request and no context (no user, no context processors) and must not touch the database."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.template import loader
from django.test import Client
from django.urls import path

from notebook.urls import urlpatterns as site_urlpatterns

STYLESHEET = 'href="/static/css/app.css"'


def _forbidden(request: HttpRequest) -> HttpResponse:
    raise PermissionDenied("not yours")


def _broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug")


def _bad(request: HttpRequest) -> HttpResponse:
    raise SuspiciousOperation("malformed")


# This module is the URLconf of the tests below (@pytest.mark.urls): the site plus three views
# that fail on purpose.
urlpatterns = [
    path("test-errors/forbidden/", _forbidden),
    path("test-errors/broken/", _broken),
    path("test-errors/bad/", _bad),
    *site_urlpatterns,
]


def assert_site_page(response: Any, status: int, heading: str) -> str:
    assert response.status_code == status
    html: str = response.content.decode()
    assert STYLESHEET in html, "the error page lacks the site's stylesheet"
    assert f'<h1 id="error-title">{heading}</h1>' in html
    assert 'class="skip-link"' in html
    return html


@pytest.fixture(autouse=True)
def _production(settings) -> None:
    settings.DEBUG = False  # Django's technical pages instead of ours otherwise


@pytest.mark.django_db
def test_404_is_styled_with_a_way_back_to_the_notebooks(alice_client: Client) -> None:
    html = assert_site_page(alice_client.get("/no-such-page/"), 404, "Page not found")
    assert 'href="/">Back to your notebooks</a>' in html
    assert 'href="/search/"' in html
    assert "Log out" in html  # the whole site header, for a logged-in user


@pytest.mark.django_db
def test_anothers_notebook_answers_the_same_styled_404(alice_client: Client, bob_notebook) -> None:
    html = assert_site_page(
        alice_client.get(f"/notebooks/{bob_notebook.pk}/"), 404, "Page not found"
    )
    assert bob_notebook.title not in html


@pytest.mark.django_db
def test_404_for_a_visitor_offers_the_login(anon_client: Client) -> None:
    html = assert_site_page(anon_client.get("/no-such-page/"), 404, "Page not found")
    assert 'href="/accounts/login/">Log in</a>' in html


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_403_is_styled_with_a_way_back(alice_client: Client) -> None:
    html = assert_site_page(
        alice_client.get("/test-errors/forbidden/"), 403, "You cannot open this page"
    )
    assert 'href="/">Back to your notebooks</a>' in html


@pytest.mark.django_db
def test_a_csrf_failure_explains_and_leads_back() -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post("/accounts/login/", {"username": "a", "password": "b"})
    html = assert_site_page(response, 403, "This form has expired")
    assert "Nothing was saved" in html
    assert 'href="/accounts/login/">Log in</a>' in html


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_500_is_styled_with_a_way_back(alice_client: Client) -> None:
    alice_client.raise_request_exception = False
    html = assert_site_page(alice_client.get("/test-errors/broken/"), 500, "Something went wrong")
    assert 'href="/">Back to Notebook</a>' in html
    assert "alice" not in html  # no user, no context processors: nothing of the request


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_400_is_styled_with_a_way_back(alice_client: Client) -> None:
    html = assert_site_page(
        alice_client.get("/test-errors/bad/"), 400, "That request could not be read"
    )
    assert 'href="/">Back to Notebook</a>' in html


def test_500_renders_without_request_context_or_database() -> None:
    # No django_db mark: any query here fails the test.
    html = loader.get_template("500.html").render()
    assert STYLESHEET in html
    assert 'href="/">Back to Notebook</a>' in html
    assert 'src="/static/js/theme.js"' in html


@pytest.mark.django_db
def test_an_api_crash_answers_500_without_a_traceback(alice_token, monkeypatch) -> None:
    # (With DEBUG=True django-ninja would answer the traceback as text/plain.)
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("secret detail of a bug")

    monkeypatch.setattr("notes.selectors.notebook_list", broken)
    client = Client(
        raise_request_exception=False, headers={"Authorization": f"Bearer {alice_token}"}
    )
    response = client.get("/api/notebooks")
    assert response.status_code == 500
    assert b"Traceback" not in response.content
    assert b"secret detail" not in response.content
