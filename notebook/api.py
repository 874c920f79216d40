"""The root NinjaAPI: authentication, error shapes, and one router per app."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import (
    PermissionDenied,
    RequestDataTooBig,
    TooManyFieldsSent,
    TooManyFilesSent,
    ValidationError,
)
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.security import HttpBearer, SessionAuth

from accounts.models import scope_of
from accounts.services import api_token_check
from core.ratelimit import RateLimited, address_key

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class ReadOnlyToken(Exception):
    """A read-only token sent a request that could change something: 403."""


class TokenAuth(HttpBearer):
    """`Authorization: Bearer nbk_…` with a personal access token (no CSRF: no cookies involved).
    A right token is never refused for others' failures. A wrong one spends the "token" budget
    of its address and of its prefix; once either is spent, wrong tokens get 429 instead of
    401 until that window ends (accounts.services.api_token_check). A read-only token gets 403
    for any method but GET, HEAD and OPTIONS; a token limited to notebooks sees only those
    (its scope travels on request.user to notes.selectors)."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = api_token_check(raw=token, address=address_key(request))
        if user is None:
            return None
        scope = scope_of(user)
        if scope is not None and scope.read_only and request.method not in SAFE_METHODS:
            raise ReadOnlyToken
        request.user = user
        return user


api = NinjaAPI(
    title="Notebook API",
    version="1",
    description=(
        "Notebooks, notes, sources, search and chat. Authenticate with a personal "
        "access token (`Authorization: Bearer nbk_…`, created under Settings) or, in the "
        "browser, with your session plus the CSRF token. [← Back to Notebook](/settings/)"
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


@api.exception_handler(PermissionDenied)
def permission_denied(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    # A member of a shared notebook whose role does not allow this (notes.selectors).
    detail = str(exc) or "You are not allowed to do this."
    return api.create_response(request, {"detail": detail}, status=403)


@api.exception_handler(ReadOnlyToken)
def read_only_token(request: HttpRequest, exc: ReadOnlyToken) -> HttpResponse:
    detail = (
        "This token is read-only: it may only read (GET). Create a token without "
        "“Read-only” under Settings → Personal access tokens to change anything."
    )
    return api.create_response(request, {"detail": detail}, status=403)


@api.exception_handler(RateLimited)
def rate_limited(request: HttpRequest, exc: RateLimited) -> HttpResponse:
    response = api.create_response(request, {"detail": exc.message}, status=429)
    response["Retry-After"] = str(exc.retry_after)
    return response


# Over Django's request limits, said in JSON like every other error (Django answers them with
# its HTML 400 page). 413 for all three: the cure is the same, to send less in one request.
@api.exception_handler(RequestDataTooBig)
def request_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    detail = f"The request body is too large: at most {limit:,} bytes, besides uploaded files."
    return _too_large(request, detail)


@api.exception_handler(TooManyFieldsSent)
def too_many_fields(request: HttpRequest, exc: TooManyFieldsSent) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    return _too_large(request, f"Too many fields in one request: at most {limit:,}.")


@api.exception_handler(TooManyFilesSent)
def too_many_files(request: HttpRequest, exc: TooManyFilesSent) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FILES
    return _too_large(request, f"Too many files in one request: at most {limit:,}.")


def _too_large(request: HttpRequest, detail: str) -> HttpResponse:
    # As Django's own handler does: nothing may parse the half-read body again.
    request._mark_post_parse_error()  # type: ignore[attr-defined]
    return api.create_response(request, {"detail": detail}, status=413)


api.add_router("/", "accounts.api.router")
api.add_router("/", "notes.api.router")
api.add_router("/", "attachments.api.router")
api.add_router("/", "search.api.router")
api.add_router("/", "chat.api.router")
api.add_router("/", "chat.mention_api.router")
api.add_router("/", "guides.api.router")
api.add_router("/", "intelligence.api.router")
api.add_router("/", "studio.api.router")
api.add_router("/", "exports.api.router")
