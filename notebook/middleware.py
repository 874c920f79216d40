from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import render, resolve_url
from django.utils import translation
from django.utils.deprecation import MiddlewareMixin
from django.utils.html import format_html
from django.utils.translation import gettext

from core.params import (
    CONTROL_CHARACTERS_REFUSED,
    has_control_characters,
    holds_control_characters,
)
from notebook.api import api as ninja_api


class LoginRequiredForPagesAndFragments(LoginRequiredMiddleware):
    """Django's LoginRequiredMiddleware, except that a background request (htmx polling, our
    upload XHR) from a logged-out browser gets 401 with `HX-Redirect` to the login page (htmx
    then navigates the whole page), instead of a redirect whose login form would be swapped
    into the middle of the page."""

    def handle_no_permission(  # type: ignore[override]  # a 401, not only redirects
        self, request: HttpRequest, view_func: Callable[..., HttpResponseBase]
    ) -> HttpResponseBase:
        if request.headers.get("HX-Request") or request.headers.get("X-Upload"):
            current = urlsplit(request.headers.get("HX-Current-URL") or request.get_full_path())
            back_to = current.path + (f"?{current.query}" if current.query else "")
            login = redirect_to_login(back_to, resolve_url(self.get_login_url(view_func)))
            response = HttpResponse(gettext("Your session has ended. Log in again."), status=401)
            response["HX-Redirect"] = login["Location"]
            return response
        return super().handle_no_permission(request, view_func)


API_PREFIX = "/api/"  # notebook/urls.py mounts the NinjaAPI here


class ApiInEnglish(MiddlewareMixin):
    """The API answers in English whatever the client's Accept-Language or language cookie:
    scripts match its `detail` texts, which come from the same services (and their translated
    messages) as the pages. Runs after LocaleMiddleware, which chose the page language."""

    def process_request(self, request: HttpRequest) -> None:
        if request.path_info.startswith(API_PREFIX):
            translation.activate(settings.LANGUAGE_CODE)
            request.LANGUAGE_CODE = translation.get_language()


_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


class RefuseControlCharacters(MiddlewareMixin):
    """400 for a request with a C0 control character (NUL and the others but the whitespace
    ones; core.params) in its path, its query string, its form fields (not the files
    uploaded), or, on the API, anywhere in its JSON body: no field may hold one, and
    PostgreSQL cannot store a NUL at all. Pages get the site's 400 page saying so, htmx and
    upload requests a fragment, the API `{"detail": …}`.

    In `process_view`, after the login check: a logged-out browser is still sent to log in,
    and nothing of its body is read here."""

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., HttpResponseBase],
        view_args: Any,
        view_kwargs: Any,
    ) -> HttpResponseBase | None:
        api = request.path_info.startswith(API_PREFIX)
        try:
            found = _holds_control_characters(request, api=api)
        except (RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent) as exc:
            # Over Django's limits while reading the body: the answer the view would give
            # (the API's JSON 413; Django's 400 page), now that the body cannot be read again.
            if api:
                return ninja_api.on_exception(request, exc)
            raise
        if not found:
            return None
        message = str(CONTROL_CHARACTERS_REFUSED)
        if api:
            return JsonResponse({"detail": message}, status=400)
        if request.headers.get("HX-Request") or request.headers.get("X-Upload"):
            return HttpResponse(
                format_html('<p class="error-text" role="alert">{}</p>', message), status=400
            )
        return render(request, "400.html", {"reason": message}, status=400)


def _holds_control_characters(request: HttpRequest, *, api: bool) -> bool:
    texts = [request.path_info]
    for key, values in request.GET.lists():
        texts += [key, *values]
    content_type = request.content_type or ""
    # The API reads JSON and, for uploads, multipart forms: a form sent to it otherwise is
    # ignored there, and left unread here.
    forms = ("multipart/form-data",) if api else _FORMS
    if request.method == "POST" and content_type in forms:
        for key, values in request.POST.lists():
            texts += [key, *values]
        texts += list(request.FILES)  # (Django strips non-printables from the files' names)
    if any(has_control_characters(text) for text in texts):
        return True
    if api and content_type not in _FORMS and request.body:
        # Read as ninja reads a body, JSON whatever the Content-Type says.
        try:
            data = json.loads(request.body)
        except (ValueError, RecursionError):
            return False  # the API answers what it cannot parse itself
        return holds_control_characters(data)
    return False
