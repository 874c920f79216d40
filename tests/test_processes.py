"""The processes `make run` starts, started for real: the launcher, the web server, the worker."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import redis
from django.db import connection

from notebook.database import database_url
from tests.fixtures.processes import (
    _free_port,
    _postgres_running,
    _stop_serve,
    _wait_for_line,
    as_from_a_terminal,
)

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
        text=True, check=True, timeout=120,
    ).stdout  # fmt: skip


def _http_status(port: int, path: str) -> int:
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        return int(opener.open(f"http://127.0.0.1:{port}{path}", timeout=10).status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_serve_runs_web_and_worker_on_a_fresh_data_dir_and_stops_cleanly(tmp_path):
    """What `make run` does, twice on the same DATA_DIR, with manage.py used alongside."""
    port = _free_port()
    env = {**os.environ, "DATA_DIR": str(tmp_path), "PORT": str(port), "PYTHONUNBUFFERED": "1"}
    env.pop("DATABASE_URL", None)
    env.pop("SECRET_KEY", None)

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "manage.py", "serve"], cwd=ROOT, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=as_from_a_terminal,
        )  # fmt: skip

    proc = start()
    try:
        _wait_for_line(proc, f"Notebook is running at http://127.0.0.1:{port}/", 120)
        assert _http_status(port, "/accounts/login/") == 200
        assert _http_status(port, "/") == 302
        assert _http_status(port, "/api/notebooks") == 401
        # manage.py attaches to the running embedded server while web and worker use it.
        code = "from django.contrib.auth.models import User; User.objects.create_user('kept')"
        _manage(env, "shell", "--no-imports", "-c", code)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert any("qcluster" in " ".join(c.cmdline()) for c in children)
        assert any("daphne" in " ".join(c.cmdline()) for c in children)
    finally:
        output = _stop_serve(proc)
    assert proc.returncode == 0, output
    assert "Stopped." in output
    assert not _postgres_running(tmp_path / "postgres")
    assert all(not c.is_running() or c.status() == psutil.STATUS_ZOMBIE for c in children)

    proc = start()  # the second run reuses the data
    try:
        _wait_for_line(proc, "Notebook is running", 120)
        code = "from django.contrib.auth.models import User; "
        code += "print(User.objects.filter(username='kept').exists())"
        out = _manage(env, "shell", "--no-imports", "-c", code)
        assert out.strip() == "True"
    finally:
        _stop_serve(proc)
    assert proc.returncode == 0


def test_serve_refuses_a_busy_port(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "PORT": str(port)}
        result = subprocess.run(
            [sys.executable, "manage.py", "serve"], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode != 0
    assert f"Port {port}" in result.stderr


def _redis_available() -> bool:
    try:
        return bool(redis.Redis.from_url("redis://127.0.0.1:6379/0").ping())
    except redis.RedisError:
        return False


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("broker", ["orm", "redis"])
def test_a_real_worker_runs_enqueued_tasks(broker):
    """A task enqueued by one process is executed by a separate `qcluster` worker."""
    if broker == "redis" and not _redis_available():
        pytest.fail("Redis is expected on 127.0.0.1:6379 for the multi-machine path")
    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "TASK_BROKER": broker,
        "REDIS_URL": "redis://127.0.0.1:6379/15",
        "WORKERS": "1",
    }
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        out = _manage(
            env, "shell", "--no-imports", "-c",
            "from django_q.tasks import async_task, result; "
            "task_id = async_task('math.factorial', 10); "
            "print(result(task_id, wait=60000))",
        )  # fmt: skip
        assert out.strip() == "3628800"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
