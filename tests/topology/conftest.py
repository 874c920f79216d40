"""The browser of the browser tests (Debian's Chromium, one per session)."""

from tests.e2e.conftest import browser

__all__ = ["browser"]
