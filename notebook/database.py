"""Build Django's DATABASES entry from DATABASE_URL or from the embedded server."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from django.core.exceptions import ImproperlyConfigured
from psycopg.conninfo import conninfo_to_dict

from notebook.embedded_db import ensure_server


def database_from_url(url: str) -> dict[str, Any]:
    """Parse a libpq URL (postgres://user:pw@host:port/db?sslmode=...; host may be a socket dir)."""
    if not url.startswith(("postgres://", "postgresql://")):
        raise ImproperlyConfigured("DATABASE_URL must be a postgres:// or postgresql:// URL")
    try:
        params: dict[str, Any] = dict(conninfo_to_dict(url))
    except Exception as exc:
        raise ImproperlyConfigured(f"DATABASE_URL cannot be parsed: {exc}") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.pop("dbname", "") or "postgres",
        "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""),
        "HOST": params.pop("host", ""),
        "PORT": str(params.pop("port", "")),
        "OPTIONS": params,
    }


def embedded_database(data_dir: Path) -> dict[str, Any]:
    params = ensure_server(data_dir)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params["dbname"],
        "USER": params["user"],
        "PASSWORD": "",
        "HOST": params["host"],
        "PORT": str(params["port"]),
        "OPTIONS": {},
    }


def database_url(database: dict[str, Any]) -> str:
    """The libpq URL for a Django DATABASES entry (so child processes connect the same way)."""

    user = quote(database.get("USER") or "", safe="")
    password = quote(database.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = database.get("HOST") or ""
    query = dict(database.get("OPTIONS") or {})
    netloc = auth
    if host.startswith("/"):
        query["host"] = host  # a Unix socket directory goes in the query string
        if database.get("PORT"):
            query["port"] = database["PORT"]
    else:
        netloc += quote(host, safe="[]:") + (f":{database['PORT']}" if database.get("PORT") else "")
    suffix = f"?{urlencode(query)}" if query else ""
    return f"postgresql://{netloc}/{quote(database['NAME'], safe='')}{suffix}"
