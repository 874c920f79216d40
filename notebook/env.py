"""Small typed readers for environment variables; bad values raise ImproperlyConfigured."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false, yes/no), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    value = env_str(name, default).lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def env_path(name: str, default: Path) -> Path:
    raw = env_str(name)
    return Path(raw).expanduser().resolve() if raw else default.resolve()


def env_rate(name: str, default: str) -> str:
    """A rate as core.ratelimit reads it: count/period, the period s, m, h or d with an
    optional multiplier (`30/m`, `100/15m`)."""
    value = env_str(name, default).replace(" ", "").lower()
    if not re.fullmatch(r"[1-9][0-9]*/([1-9][0-9]*)?[smhd]", value):
        raise ImproperlyConfigured(f"{name} must be a rate like 30/m or 100/15m, got {value!r}")
    return value


def env_https_url(name: str) -> str:
    """An https:// URL without a trailing slash, or "" when unset. Plain http:// only to this
    machine (localhost, 127.0.0.1, [::1]): tests and a provider on the same host."""
    value = env_str(name).rstrip("/")
    if not value:
        return ""
    parts = urlsplit(value)
    loopback = parts.hostname in ("localhost", "127.0.0.1", "::1")
    if not parts.hostname or not (parts.scheme == "https" or (parts.scheme == "http" and loopback)):
        raise ImproperlyConfigured(
            f"{name} must be an https:// URL (http:// only to localhost), got {value!r}"
        )
    if parts.query or parts.fragment:
        raise ImproperlyConfigured(f"{name} must have no query or fragment, got {value!r}")
    return value
