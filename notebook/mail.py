"""Django's EMAIL_* settings from EMAIL_URL (or the separate EMAIL_HOST, … variables)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from notebook.env import env_bool, env_int, env_str

_BACKENDS = {
    "smtp": "django.core.mail.backends.smtp.EmailBackend",
    "console": "django.core.mail.backends.console.EmailBackend",
    "file": "django.core.mail.backends.filebased.EmailBackend",
    "locmem": "django.core.mail.backends.locmem.EmailBackend",
    "dummy": "django.core.mail.backends.dummy.EmailBackend",
}
CONSOLE = _BACKENDS["console"]


def email_from_url(url: str) -> dict[str, Any]:
    """`smtp://user:password@host:587` (plain, or STARTTLS with `smtp+tls://` or `?tls=1`),
    `smtps://…` (TLS from the start, port 465 by default), `console://`, `file:///dir`,
    `locmem://`, `dummy://` → EMAIL_BACKEND and the settings it reads. The user and password
    are URL-encoded (`%40` for an @ in them)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    tls = scheme in ("smtp+tls", "submission")
    ssl = scheme in ("smtps", "smtp+ssl")
    kind = "smtp" if tls or ssl else scheme
    if kind not in _BACKENDS:
        raise ImproperlyConfigured(
            "EMAIL_URL must start with smtp://, smtp+tls://, smtps://, console://, file://, "
            f"locmem:// or dummy://, got {scheme or url!r}"
        )
    config: dict[str, Any] = {"EMAIL_BACKEND": _BACKENDS[kind]}
    if kind == "file":
        if not parts.path:
            raise ImproperlyConfigured("EMAIL_URL file:// needs a directory: file:///var/mail")
        config["EMAIL_FILE_PATH"] = unquote(parts.path)
    if kind != "smtp":
        return config
    query = {key.lower(): values[-1] for key, values in parse_qs(parts.query).items()}
    tls = tls or query.get("tls", "").lower() in ("1", "true", "yes", "on")
    ssl = ssl or query.get("ssl", "").lower() in ("1", "true", "yes", "on")
    if tls and ssl:
        raise ImproperlyConfigured("EMAIL_URL asks for both STARTTLS and TLS: pick one")
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"EMAIL_URL has a bad port: {url!r}") from None
    if not parts.hostname:
        raise ImproperlyConfigured("EMAIL_URL smtp:// needs a host: smtp://mail.example.org:587")
    config.update(
        EMAIL_HOST=parts.hostname,
        EMAIL_PORT=port or (465 if ssl else 587 if tls else 25),
        EMAIL_HOST_USER=unquote(parts.username or ""),
        EMAIL_HOST_PASSWORD=unquote(parts.password or ""),
        EMAIL_USE_TLS=tls,
        EMAIL_USE_SSL=ssl,
    )
    return config


def email_settings() -> dict[str, Any]:
    """EMAIL_URL when set; else SMTP to EMAIL_HOST when that is set; else the console (mails
    are printed to the web process's output, which is enough to try password resets)."""
    if url := env_str("EMAIL_URL"):
        config = email_from_url(url)
    elif host := env_str("EMAIL_HOST"):
        use_tls, use_ssl = env_bool("EMAIL_USE_TLS", False), env_bool("EMAIL_USE_SSL", False)
        if use_tls and use_ssl:
            raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL cannot both be on")
        config = {
            "EMAIL_BACKEND": _BACKENDS["smtp"],
            "EMAIL_HOST": host,
            "EMAIL_PORT": env_int(
                "EMAIL_PORT", 465 if use_ssl else 587 if use_tls else 25, minimum=1
            ),
            "EMAIL_HOST_USER": env_str("EMAIL_HOST_USER"),
            "EMAIL_HOST_PASSWORD": env_str("EMAIL_HOST_PASSWORD"),
            "EMAIL_USE_TLS": use_tls,
            "EMAIL_USE_SSL": use_ssl,
        }
    else:
        config = {"EMAIL_BACKEND": CONSOLE}
    # A mail server that does not answer must not hold a password-reset request for minutes.
    config["EMAIL_TIMEOUT"] = env_int("EMAIL_TIMEOUT", 10, minimum=1)
    config["DEFAULT_FROM_EMAIL"] = env_str("DEFAULT_FROM_EMAIL", "notebook@localhost")
    return config
