"""Rate limits: questions, uploads, note writes, reprocessing, previews and searches per user,
wrong API tokens per client address and per token prefix, sign-up attempts per client address,
password-reset requests per email address and per client address.

Counts live in the "ratelimit" cache, which every process sees: Redis when REDIS_URL is set,
else a table in PostgreSQL (AtomicDatabaseCache below); both increment atomically.

The window slides: a period is cut into BUCKETS slices, one cache key each, and a request
counts the current slice and the BUCKETS before it (and the next one, which only a process
whose clock runs ahead has written to). That span covers every window of one period that ends
now, so no window of a period, wherever it starts, passes more than the limit (a fixed window
let a burst at its end and another at the start of the next pass twice the limit). The price
is that a refusal can last up to a slice longer than a true sliding window's would.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import math
import pickle
import time
from typing import TYPE_CHECKING, Any, Literal

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.db import DatabaseCache
from django.db import connections, router, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.timezone import now
from django.utils.translation import gettext, gettext_lazy, ngettext

if TYPE_CHECKING:
    from core.types import User

Scope = Literal[
    "chat",
    "upload",
    "preview",
    "token",
    "signup",
    "reset_email",
    "reset_address",
    "note",
    "reprocess",
    "search",
]

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
BUCKETS = 10  # slices of a period: a refusal lasts at most a tenth of a period too long
# In the language of the request that was refused (the API's is always English).
_TOO_FAST = {
    "chat": gettext_lazy(
        "You are asking questions too fast (at most %(limit)s %(per)s). Try again in %(wait)s."
    ),
    "upload": gettext_lazy(
        "You are uploading too fast (at most %(limit)s files %(per)s). Try again in %(wait)s."
    ),
    "preview": gettext_lazy(
        "Too many previews (at most %(limit)s %(per)s). Try again in %(wait)s."
    ),
    "token": gettext_lazy(
        "Too many requests with a wrong API token (at most %(limit)s %(per)s from one address, "
        "or with one token). Try again in %(wait)s."
    ),
    "signup": gettext_lazy(
        "Too many sign-up attempts from your address (at most %(limit)s %(per)s). "
        "Try again in %(wait)s."
    ),
    # Both say the same whether the address has an account or not.
    "reset_email": gettext_lazy(
        "Too many password-reset requests for this email address (at most %(limit)s %(per)s). "
        "Try again in %(wait)s."
    ),
    "reset_address": gettext_lazy(
        "Too many password-reset requests from your address (at most %(limit)s %(per)s). "
        "Try again in %(wait)s."
    ),
    "note": gettext_lazy(
        "You are saving notes too fast (at most %(limit)s %(per)s). Try again in %(wait)s."
    ),
    "reprocess": gettext_lazy(
        "You are reprocessing sources too fast (at most %(limit)s %(per)s). Try again in %(wait)s."
    ),
    "search": gettext_lazy(
        "You are searching too fast (at most %(limit)s searches %(per)s). Try again in %(wait)s."
    ),
}


class RateLimited(Exception):
    """Refused: the scope's budget is spent; enough of it comes back `retry_after` seconds on."""

    def __init__(self, scope: Scope, *, retry_after: int) -> None:
        self.scope = scope
        self.retry_after = max(retry_after, 1)
        limit, period = parse_rate(settings.RATE_LIMITS[scope])
        self.message = str(_TOO_FAST[scope]) % {
            "limit": limit,
            "per": _per(period),
            "wait": wait_text(self.retry_after),
        }
        super().__init__(self.message)


def parse_rate(rate: str) -> tuple[int, int]:
    """`30/m` → (30, 60); `100/15m` → (100, 900). The rate was checked by env_rate."""
    count, period = rate.split("/")
    return int(count), int(period[:-1] or 1) * _PERIODS[period[-1]]


def wait_text(seconds: int) -> str:
    """`42 seconds`, `1 minute`, `15 minutes`, `2 hours`: how long, rounded up."""
    if seconds < 60:
        n = max(seconds, 1)
        return ngettext("%(n)d second", "%(n)d seconds", n) % {"n": n}
    minutes = math.ceil(seconds / 60)
    if minutes < 120:
        return ngettext("%(n)d minute", "%(n)d minutes", minutes) % {"n": minutes}
    hours = math.ceil(minutes / 60)
    return ngettext("%(n)d hour", "%(n)d hours", hours) % {"n": hours}


def _per(period: int) -> str:
    named = {
        1: gettext("a second"),
        60: gettext("a minute"),
        3600: gettext("an hour"),
        86400: gettext("a day"),
    }
    return named.get(period) or gettext("every %(period)s") % {"period": wait_text(period)}


def user_key(user: User) -> str:
    return f"user:{user.pk}"


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: REMOTE_ADDR, or with NUM_PROXIES proxies in front, the address the
    outermost proxy saw, counted from the right of X-Forwarded-For (entries further left are
    whatever the client sent)."""
    if settings.NUM_PROXIES:
        header = request.META.get("HTTP_X_FORWARDED_FOR", "")
        hops = [hop.strip() for hop in header.split(",") if hop.strip()]
        if hops:
            try:
                return str(ipaddress.ip_address(hops[-min(settings.NUM_PROXIES, len(hops))]))
            except ValueError:
                pass
    return request.META.get("REMOTE_ADDR") or None


def client_network(request: HttpRequest) -> str | None:
    """The client's address as limits count it: an IPv4 address as is, an IPv6 one as its /64
    network address (one client usually holds a whole /64, and can pick any address in it).
    Still an IP address, as django-axes stores it (AXES_CLIENT_IP_CALLABLE), so that login
    lockouts and rate limits group addresses alike."""
    ip = client_ip(request)
    try:
        address = ipaddress.ip_address(ip or "")
    except ValueError:
        return ip
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped:  # a dual-stack socket's IPv4 client: the IPv4 address
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False).network_address)
    return str(address)


def address_key(request: HttpRequest) -> str:
    """The client address as a limit key; IPv6 by /64 (client_network)."""
    return f"ip:{client_network(request) or 'unknown'}"


def _clock() -> float:
    """Wall-clock seconds, which every process on every machine shares (tests move it)."""
    return time.time()


def spend(*, group: str, key: str, rate: str, cost: int = 1) -> int | None:
    """Spend `cost` of `key`'s budget in `group` at `rate` (`30/m`): None when spent, else
    the seconds until that much fits again, having spent nothing.

    The slice's count goes up first (atomic), the others are read, and an overdraft is taken
    back: two requests at once cannot both pass on the last unit, since whichever counts
    second sees the other (at worst both are refused). Each slice's key expires once no
    window counts it any more."""
    limit, period = parse_rate(rate)
    if cost > limit:
        return period  # never fits; said as "after a whole period"
    width = period / BUCKETS
    now = _clock()
    current = int(now // width)
    # A digest: token prefixes and addresses stay out of the cache, and any key is a safe one.
    digest = hashlib.sha256(f"{group}\0{key}".encode()).hexdigest()[:32]
    cache = caches["ratelimit"]
    mine = f"rl:{group}:{digest}:{current}"
    try:
        count = cache.incr(mine, cost)
    except ValueError:  # the slice's first request (add is slower: the table counts its rows)
        cache.add(mine, 0, timeout=math.ceil(width * (BUCKETS + 2)) + 1)
        count = cache.incr(mine, cost)
    slices = [current - n for n in range(1, BUCKETS + 1)] + [current + 1]
    found = cache.get_many([f"rl:{group}:{digest}:{n}" for n in slices])
    counts = {n: int(found.get(f"rl:{group}:{digest}:{n}") or 0) for n in slices}
    total = count + sum(counts.values())
    if total <= limit:
        return None
    cache.incr(mine, -cost)
    counts[current] = count - cost
    # Slice n leaves the count when slice n + BUCKETS + 1 begins: wait for the oldest to leave
    # until what is left and `cost` fit.
    left = 0
    for n in sorted(counts):
        left += counts[n]
        if left >= total - limit:
            return max(math.ceil((n + BUCKETS + 1) * width - now), 1)
    return period


def rate_limit(*, scope: Scope, key: str, cost: int = 1) -> None:
    """Spend `cost` of `key`'s budget for `scope`, or raise RateLimited, spending nothing, when
    that much is not left in the window of one period that ends now."""
    retry_after = spend(group=scope, key=key, rate=settings.RATE_LIMITS[scope], cost=cost)
    if retry_after is not None:
        raise RateLimited(scope, retry_after=retry_after)


def too_many_requests(response: HttpResponse, exc: RateLimited) -> HttpResponse:
    """`response` as a 429 that says when to come back."""
    response.status_code = 429
    response["Retry-After"] = str(exc.retry_after)
    return response


def rate_limited_page(request: HttpRequest, exc: RateLimited, *, back_url: str) -> HttpResponse:
    """A page saying what was refused and when to retry, for plain form posts (fragments say
    it in their own markup: an upload row, the ask form)."""
    context = {"message": exc.message, "back_url": back_url}
    return too_many_requests(render(request, "accounts/rate_limited.html", context), exc)


class AtomicDatabaseCache(DatabaseCache):
    """Django's database cache with an atomic incr() that keeps the expiry: the row is locked
    (SELECT … FOR UPDATE) while its count goes up, so requests at the same moment are all
    counted. (DatabaseCache.incr is get-then-set, which loses concurrent hits and resets the
    expiry.)"""

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        db = router.db_for_write(self.cache_model_class)
        connection = connections[db]
        table = connection.ops.quote_name(self.cache_model_class._meta.db_table)
        cache_key = self.make_and_validate_key(key, version=version)
        expires_after = connection.ops.adapt_datetimefield_value(now())
        with transaction.atomic(using=db), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT value FROM {table} WHERE cache_key = %s AND expires > %s FOR UPDATE",  # noqa: S608 - the table name is ours
                [cache_key, expires_after],
            )
            row = cursor.fetchone()
            if row is None:
                raise ValueError(f"Key {key!r} not found")
            stored = connection.ops.process_clob(row[0])
            # Our own table, written only by this cache (as DatabaseCache itself does).
            value = pickle.loads(base64.b64decode(stored.encode())) + delta  # noqa: S301
            encoded = base64.b64encode(pickle.dumps(value, self.pickle_protocol)).decode("latin1")
            cursor.execute(
                f"UPDATE {table} SET value = %s WHERE cache_key = %s",  # noqa: S608
                [encoded, cache_key],
            )
        return int(value)
