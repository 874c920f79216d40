"""The HTTP side of an export: a ZIP streamed as it is written, a Markdown, CSV or PDF file."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Iterator

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils.http import content_disposition_header

from exports.archive import azip_chunks, zip_chunks
from exports.bundles import Bundle


def _private(response: HttpResponse | StreamingHttpResponse, filename: str) -> None:
    response["Content-Disposition"] = content_disposition_header(True, filename)
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, no-store"


def zip_response(request: HttpRequest, bundle: Bundle) -> StreamingHttpResponse:
    """The bundle as a ZIP download, sent while it is written. Django reads a sync iterator
    whole before sending under ASGI (and an async one under WSGI): each server gets the kind
    it streams."""
    content: Iterator[bytes] | AsyncIterator[bytes]
    if isinstance(request, ASGIRequest):
        content = azip_chunks(bundle.archive)
    else:
        content = zip_chunks(bundle.archive)
    response = StreamingHttpResponse(content, content_type="application/zip")
    _private(response, bundle.filename)
    response["X-Accel-Buffering"] = "no"  # nginx would otherwise spool it to disk first
    return response


def markdown_response(filename: str, text: str) -> HttpResponse:
    response = HttpResponse(text.encode(), content_type="text/markdown; charset=utf-8")
    _private(response, filename)
    return response


def pdf_response(filename: str, data: bytes) -> HttpResponse:
    response = HttpResponse(data, content_type="application/pdf")
    _private(response, filename)
    return response


def csv_response(filename: str, rows: list[list[str]]) -> HttpResponse:
    """Rows as a CSV download (UTF-8 with a byte order mark, which spreadsheets and Anki read)."""
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    response = HttpResponse(
        ("\ufeff" + buffer.getvalue()).encode(), content_type="text/csv; charset=utf-8"
    )
    _private(response, filename)
    return response
