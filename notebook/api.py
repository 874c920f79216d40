"""The root NinjaAPI: authentication, error shapes, and one router per app."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.security import HttpBearer, SessionAuth

from accounts.services import api_token_authenticate
from notebook.ratelimit import RateLimited, address_key, rate_limit, rate_limit_check


class TokenAuth(HttpBearer):
    """`Authorization: Bearer nbk_…` with a personal access token (no CSRF: no cookies involved).
    An address that sent too many wrong tokens gets 429 until its window ends, right token or
    not."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        address = address_key(request)
        rate_limit_check(scope="token", key=address)
        user = api_token_authenticate(raw=token)
        if user is None:
            rate_limit(scope="token", key=address)
            return None
        request.user = user
        return user


api = NinjaAPI(
    title="Notebook API",
    version="1",
    description=(
        "Notebooks, notes, PDF attachments, search and chat. Authenticate with a personal "
        "access token (`Authorization: Bearer nbk_…`, created under Settings) or, in the "
        "browser, with your session plus the CSRF token."
    ),
    urls_namespace="api",
    # Token first: the session check rejects an unsafe request without a CSRF token outright,
    # which would otherwise refuse scripts that send a valid bearer token.
    auth=[TokenAuth(), SessionAuth()],
)


@api.exception_handler(ValidationError)
def validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors: Any = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
    conflicts = {"trashed", "not_trashed", "active", "state", "locked", "duplicate"}
    status = 409 if getattr(exc, "code", None) in conflicts else 422
    detail = "; ".join(m for msgs in errors.values() for m in msgs)
    return api.create_response(request, {"detail": detail, "errors": errors}, status=status)


@api.exception_handler(RateLimited)
def rate_limited(request: HttpRequest, exc: RateLimited) -> HttpResponse:
    response = api.create_response(request, {"detail": exc.message}, status=429)
    response["Retry-After"] = str(exc.retry_after)
    return response


api.add_router("/", "accounts.api.router")
api.add_router("/", "notes.api.router")
api.add_router("/", "attachments.api.router")
api.add_router("/", "attachments.api.search_router")
api.add_router("/", "chat.api.router")
