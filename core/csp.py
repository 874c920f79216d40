"""The Content-Security-Policy header: django-csp's middleware with the policy from settings
(CONTENT_SECURITY_POLICY), plus the page's own WebSocket origin in connect-src, and the
directives always in the settings' order."""

from __future__ import annotations

from csp.constants import HEADER
from csp.middleware import CSPMiddleware, PolicyParts
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponseBase


def socket_origin(request: HttpRequest) -> str | None:
    """`ws://host[:port]` (`wss://` over TLS) of this request, or None for a host that is not
    allowed (get_host() has validated the value, so it cannot smuggle in another directive)."""
    try:
        host = request.get_host()
    except DisallowedHost:
        return None
    return f"{'wss' if request.is_secure() else 'ws'}://{host}"


def in_settings_order(policy: str) -> str:
    """django-csp 4.0 joins the directives in set order (a different order per process);
    the settings' order reads better and keeps the header stable."""
    order = list(settings.CONTENT_SECURITY_POLICY["DIRECTIVES"])
    parts = [part.strip() for part in policy.split(";") if part.strip()]

    def position(part: str) -> tuple[int, str]:
        name = part.split(maxsplit=1)[0]
        return (order.index(name) if name in order else len(order), name)

    return "; ".join(sorted(parts, key=position))


class ContentSecurityPolicyMiddleware(CSPMiddleware):
    """Sets the policy on every response that has none yet (a view may set a stricter one,
    as the PDF download does)."""

    def get_policy_parts(
        self, request: HttpRequest, response: HttpResponseBase, report_only: bool = False
    ) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        origin = socket_origin(request)
        if origin is None or report_only:
            return parts
        # 'self' covers ws:/wss: of this origin only in CSP level 3 browsers; name it as well.
        update = dict(parts.update or {})
        extra = update.get("connect-src") or []
        update["connect-src"] = [*([extra] if isinstance(extra, str) else extra), origin]
        parts.update = update
        return parts

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        had_policy = HEADER in response
        response = super().process_response(request, response)
        if not had_policy and HEADER in response:
            response[HEADER] = in_settings_order(response[HEADER])
        return response
