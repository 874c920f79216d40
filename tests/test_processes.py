"""The processes `make run` starts, started for real: the launcher, the web server, the worker."""

from __future__ import annotations

import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import redis
from django.conf import settings
from django.db import connection

from notebook.database import database_url
from tests.fixtures.processes import (
    _free_port,
    _postgres_running,
    _stop_serve,
    _wait_for_line,
    as_from_a_terminal,
)
from tests.fixtures.waiting import wait_until

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
    assert "Notebook stopped." in output
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


def _left_running(processes: list[psutil.Process]) -> list[str]:
    """Those of `processes` still running (psutil tells a reused pid from the same process)."""
    running = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                running.append(" ".join(p.cmdline()))
        except psutil.NoSuchProcess:
            pass
    return running


def _assert_stopped_cleanly(status: int, output: str, children: list[psutil.Process]) -> None:
    assert status == 0, output
    assert "Notebook stopped." in output, output
    assert "unexpectedly" not in output, output
    assert "Traceback" not in output, output
    wait_until(
        lambda: not _left_running(children), 30, message=lambda: str(_left_running(children))
    )


def test_ctrl_c_to_the_whole_process_group_stops_serve_cleanly(tmp_path):
    """A terminal's Ctrl-C: SIGINT to every process of the foreground group at once. `serve`
    alone gets it (its children run in groups of their own), stops them, then the embedded
    server, and exits 0 with its stopped line; nothing is left running."""
    port = _free_port()
    env = {**os.environ, "DATA_DIR": str(tmp_path), "PORT": str(port), "PYTHONUNBUFFERED": "1"}
    env.pop("DATABASE_URL", None)
    env.pop("SECRET_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "serve"], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=as_from_a_terminal,
        process_group=0,  # its own group, as a shell starts a job
    )  # fmt: skip
    try:
        _wait_for_line(proc, f"Notebook is running at http://127.0.0.1:{port}/", 120)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert any("qcluster" in " ".join(c.cmdline()) for c in children)
        assert any("daphne" in " ".join(c.cmdline()) for c in children)
        assert _postgres_running(tmp_path / "postgres")
        # The group's signal is for serve alone: no child is in its group to hear it too.
        assert [c.cmdline() for c in children if os.getpgid(c.pid) == proc.pid] == []
        os.killpg(proc.pid, signal.SIGINT)
        output = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            _stop_serve(proc)
    _assert_stopped_cleanly(proc.returncode, output, children)
    assert not _postgres_running(tmp_path / "postgres")


def _read_pty(fd: int, until: bytes | None, timeout: float) -> bytes:
    """What the terminal shows until `until` (or, with None, until the programs end)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while until is None or until not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{until!r} not seen in {timeout} s:\n{seen.decode()}")
        if not select.select([fd], [], [], left)[0]:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: every program on the terminal has closed it
            data = b""
        if not data:
            if until is None:
                return seen
            raise AssertionError(f"{until!r} not seen before the end:\n{seen.decode()}")
        seen += data
    return seen


@pytest.mark.django_db(transaction=True)
def test_ctrl_c_in_a_terminal_ends_make_run_with_status_0(tmp_path):
    """`make run` in a terminal, then Ctrl-C: make shares serve's process group, and GNU make,
    on SIGINT, waits for its recipe and then kills itself with the signal (status 130, whatever
    serve returned) unless serve has taken the terminal's Ctrl-C for itself."""
    port = _free_port()
    makefile = tmp_path / "Makefile"
    makefile.write_text(f"run:\n\t{sys.executable} manage.py serve\n")
    env = {
        **os.environ,
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "DATA_DIR": str(tmp_path),
        "PORT": str(port),
        "WEB_PROCESSES": "1",
        "EMBEDDING_WARM_UP": "false",
        "PYTHONUNBUFFERED": "1",
    }
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal's session, make in its foreground
        try:
            os.chdir(ROOT)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execvpe("make", ["make", "--no-print-directory", "-f", str(makefile)], env)  # noqa: S606
        finally:
            os._exit(127)
    status: int | None = None
    try:
        shown = _read_pty(fd, f"Notebook is running at http://127.0.0.1:{port}/".encode(), 120)
        children = psutil.Process(pid).children(recursive=True)
        assert any("qcluster" in " ".join(c.cmdline()) for c in children), shown
        os.write(fd, b"\x03")  # Ctrl-C, as typed
        shown += _read_pty(fd, None, 60)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        if status is None:
            for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
                p.kill()
            os.waitpid(pid, 0)
        os.close(fd)
    output = shown.decode().replace("\r\n", "\n")
    _assert_stopped_cleanly(status, output, children)
    assert "make: ***" not in output


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
