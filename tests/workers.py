"""Start a real django-q2 worker (`manage.py qcluster`) against the test database."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connection

from notebook.database import database_url


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    log: Path | None

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"the worker exited ({self.proc.returncode}):\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL the whole cluster at once, as a crash or the OOM killer would."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@contextmanager
def run_worker(log: Path | None = None, **extra_env: str) -> Iterator[Worker]:
    """A qcluster on the test database (data must be committed: transactional_db) and this
    test's MEDIA_ROOT, in its own process group; stopped (or killed) on exit."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "MEDIA_ROOT": str(settings.MEDIA_ROOT),
        "WORKERS": "1",
        **extra_env,
    }
    out = log.open("wb") if log else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        if log:
            out.close()  # type: ignore[union-attr]
    try:
        yield Worker(proc, log)
    finally:
        # SIGTERM to the cluster's main process only: it stops its children in order within a
        # second. Sent to the whole group it also kills the sentinel at once, and the main
        # process then hangs until the timeout.
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
