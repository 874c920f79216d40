"""What the site answers to, enumerated: the named page routes with the verbs their views accept,
and the API's operations with their parameters (from the OpenAPI schema). The route-enumerating
tests (tests/test_isolation.py, tests/test_hostile_input.py) walk these, so a new page or
endpoint cannot ship unchecked."""

from __future__ import annotations

import inspect
from typing import Any

from django.urls import URLPattern, get_resolver

from notebook.api import api

VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def app_patterns() -> dict[str, URLPattern]:
    """Every named page route by `namespace:name`, but the admin's (staff-only by Django) and
    the API's (enumerated from its schema instead)."""
    found: dict[str, URLPattern] = {}

    def walk(patterns: Any, namespace: str | None) -> None:
        for p in patterns:
            if isinstance(p, URLPattern):
                if p.name:
                    found[f"{namespace}:{p.name}" if namespace else p.name] = p
            elif p.namespace in ("admin", "api"):
                continue
            else:
                walk(p.url_patterns, p.namespace or namespace)

    walk(get_resolver().url_patterns, None)
    return found


def accepted_methods(pattern: URLPattern) -> set[str]:
    """The verbs a view lets through: those of its @require_http_methods (found through the
    decorators' __wrapped__ chain), of its class, or all of them."""
    view: Any = pattern.callback
    if hasattr(view, "view_class"):
        return {m.upper() for m in view.view_class.http_method_names
                if hasattr(view.view_class, m)} & set(VERBS)  # fmt: skip
    while view is not None:
        allowed = inspect.getclosurevars(view).nonlocals.get("request_method_list")
        if allowed is not None:
            return set(allowed)
        view = getattr(view, "__wrapped__", None)
    return set(VERBS)


def api_operations() -> list[tuple[str, str]]:
    """(METHOD, /api/path/{x_id}) of every API operation."""
    schema = api.get_openapi_schema()
    return [
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method in operations
    ]


def api_operation(method: str, path: str) -> dict[str, Any]:
    operation: dict[str, Any] = api.get_openapi_schema()["paths"][path][method.lower()]
    return operation


def api_body_schema(method: str, path: str) -> dict[str, Any]:
    """The schema of the operation's request body (JSON or form): `properties`, `required`."""
    schema = api.get_openapi_schema()
    for content in api_operation(method, path).get("requestBody", {}).get("content", {}).values():
        body = content.get("schema", {})
        if "$ref" in body:
            body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
        return {**body}
    return {}
