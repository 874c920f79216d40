from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import resolve_url
from django.utils import translation
from django.utils.deprecation import MiddlewareMixin
from django.utils.translation import gettext


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
