"""`manage.py check --deploy` passes, warnings included, with the production settings the README
lists; the defaults keep plain-http `make run` working (no redirect to https, no HSTS)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "notebook.example.org",
    "CSRF_TRUSTED_ORIGINS": "https://notebook.example.org",
    "BEHIND_TLS_PROXY": "true",
    "SECURE_COOKIES": "true",
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
}


def manage(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # DJANGO_ALLOW_ASYNC_UNSAFE is the browser tests' setting for this pytest process (see
    # tests/e2e/conftest.py), not a production one: the deploy check rightly refuses it.
    dropped = {*PRODUCTION, "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    base = {k: v for k, v in os.environ.items() if k not in dropped}
    # A database URL that is never dialled: the checks run without --database.
    full_env = {
        **base,
        "DATA_DIR": str(tmp_path),
        "DATABASE_URL": "postgresql://x@localhost/x",
        **env,
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        env=full_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_the_deploy_check_passes_with_production_settings(tmp_path):
    result = manage(tmp_path, PRODUCTION, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout
    assert "WARNING" not in result.stdout + result.stderr


@pytest.mark.slow
def test_the_defaults_are_for_plain_http_and_fail_the_deploy_check(tmp_path):
    result = manage(tmp_path, {}, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in result.stderr  # HSTS, https redirect, secure cookies
