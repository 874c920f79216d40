"""`manage.py serve`: the whole app in the foreground (what `make run` starts).

Prepares the database (the embedded server is started by settings when DATABASE_URL is unset),
applies migrations, collects static files, then runs WEB_PROCESSES ASGI web servers (daphne,
through notebook.daphne_http) and a django-q2 worker as child processes. Each web server loads
the embedding model in a background thread as it starts (notebook.asgi; EMBEDDING_WARM_UP):
searches before it is ready use keywords only.

Ctrl-C (SIGINT), SIGTERM or SIGHUP stops the children (SIGTERM, then SIGKILL after
SHUTDOWN_GRACE_SECONDS), then the embedded server, says "Notebook stopped." and exits 0; a
child that stops on its own meanwhile is an error (exit 1). A terminal sends Ctrl-C's SIGINT to
its whole foreground process group, so each child runs in a process group of its own and hears
only us; and under `make run`, where make shares our group and, on SIGINT, waits for us and
then kills itself with it (exit 130 whatever we return), we make a group of our own the
terminal's foreground group while we run, and give the terminal back as we end.

On Linux each web server gets a listening socket of its own on the same port (SO_REUSEPORT),
opened here and inherited (daphne's --fd), and the kernel deals new connections out among them
by a hash of the client's address and port. Elsewhere they share one socket, and a connection
goes to whichever process accepts first: that is uneven, since Twisted accepts every waiting
connection at once, so a burst of 20 sockets lands in one process and its answers run under
one interpreter lock while the other process idles. Django runs a process's sync views in
threads but Python code under one lock, so the processes are what lets a slow view (a login's
password hash, an upload) or many answers at once leave other requests alone. WebSocket events
reach sockets in every process through the channel layer (PostgreSQL's NOTIFY, or Redis).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from attachments.services import vectors_next
from core import metrics
from notebook.database import database_url

SHUTDOWN_GRACE_SECONDS = 15
MAX_DEFAULT_WEB_PROCESSES = 4
LISTEN_BACKLOG = 1024
# glibc gives threads that allocate at once their own malloc arenas (up to 8 per core), and
# what is freed in one is seldom returned to the system: a web process runs many threads (sync
# views, one per answer being written, the embedding model's). Two arenas bound that growth.
CHILD_ENV_DEFAULTS = {"MALLOC_ARENA_MAX": "2"}


def default_web_processes() -> int:
    """One web process per core, at most MAX_DEFAULT_WEB_PROCESSES (each holds the embedding
    model: ~0.5 GB)."""
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_WEB_PROCESSES))


def web_processes() -> int:
    raw = os.environ.get("WEB_PROCESSES", "").strip()
    if not raw:
        return default_web_processes()
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count < 1:
        raise CommandError(f"WEB_PROCESSES must be a whole number of at least 1, not {raw!r}.")
    return count


def _listen(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening socket for web processes to inherit; CommandError if the port is taken.
    With `reuse_port`, several such sockets can be bound to the same port (SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise CommandError(
            f"Port {port} on {host} is in use. Stop what runs there or set PORT=…."
        ) from None
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


def balances_connections() -> bool:
    """Whether the kernel spreads connections over sockets sharing a port (Linux's
    SO_REUSEPORT; other systems have the option without the balancing, or lack it)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def _listeners(host: str, port: int, count: int) -> list[socket.socket]:
    """One socket per web process where the kernel balances them, else one for all."""
    if count > 1 and balances_connections():
        socks: list[socket.socket] = []
        try:
            for _ in range(count):
                socks.append(_listen(host, port, reuse_port=True))
        except CommandError:
            for sock in socks:
                sock.close()
            raise
        return socks
    return [_listen(host, port)]


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _wait_for_http(
    host: str, port: int, procs: list[subprocess.Popen[bytes]], timeout: float
) -> bool:
    """True once a web process answers HTTP on the port (a connection alone proves
    nothing: the socket accepts into its backlog before any process serves it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        try:
            with socket.create_connection((host, port), timeout=2) as conn:
                conn.settimeout(max(0.5, deadline - time.monotonic()))
                conn.sendall(b"HEAD / HTTP/1.0\r\nHost: localhost\r\n\r\n")
                if conn.recv(12).startswith(b"HTTP/"):
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _set_foreground(fd: int, pgrp: int) -> None:
    # From a background group, tcsetpgrp sends us SIGTTOU (which would stop us): ignored.
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, pgrp)
    finally:
        signal.signal(signal.SIGTTOU, previous)


@contextlib.contextmanager
def own_terminal() -> Iterator[None]:
    """While inside, this process leads the terminal's foreground process group, so a Ctrl-C
    reaches only it, not the program that started it in its own group (make). Nothing to do
    without a terminal, in the background, or when a shell already gave us a group."""
    try:
        fd = sys.stdin.fileno()
        foreground = os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except (OSError, ValueError):
        foreground = False
    if not foreground or os.getpgrp() == os.getpid():
        yield
        return
    previous = os.getpgrp()
    os.setpgid(0, 0)
    _set_foreground(fd, os.getpid())
    # Ctrl-Z would stop only us while make waits on: nothing could resume us from that shell.
    tstp = signal.signal(signal.SIGTSTP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTSTP, tstp)
        _set_foreground(fd, previous)


class Command(BaseCommand):
    help = "Run Notebook: migrate, collect static files, start the web server and a worker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-worker", action="store_true", help="Start the web server only.")
        parser.add_argument(
            "--web-processes",
            type=int,
            default=None,
            help="Web server processes (default: WEB_PROCESSES, else one per core, at most 4).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # `kill` and a closed terminal stop us like Ctrl-C.
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        signal.signal(signal.SIGHUP, _raise_keyboard_interrupt)
        try:
            with own_terminal():
                self._serve(**options)
        except KeyboardInterrupt:
            pass  # (before the children started; after, _serve stopped them)
        self.stdout.write("Notebook stopped.")

    def _serve(self, **options: Any) -> None:
        host: str = options["host"]
        port: int = options["port"]
        count = options["web_processes"] or web_processes()
        if count < 1:
            raise CommandError("--web-processes must be at least 1.")
        if _port_in_use(host, port):
            raise CommandError(
                f"Port {port} on {host} is in use. Stop what runs there or set PORT=…."
            )

        db = settings.DATABASES["default"]
        self.stdout.write(f"Database: {db['NAME']} on {db['HOST'] or 'localhost'}")
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        if said := vectors_next.at_start():  # swaps a complete re-embedding's vectors in
            self.stdout.write(said)
        connection.close()
        metrics.reset_directory()  # this machine's samples start from zero with its processes

        # Children connect to the same server directly; only this process owns the embedded one.
        env = {**CHILD_ENV_DEFAULTS, **os.environ, "DATABASE_URL": database_url(db)}
        listeners = _listeners(host, port, count)
        # daphne, answering 414/431 for requests over Twisted's size limits, on its socket.
        fds = {f"web {i + 1}": listeners[i % len(listeners)].fileno() for i in range(count)}
        web = [sys.executable, "-m", "notebook.daphne_http"]
        commands = {
            name: [*web, "--fd", str(fd), "notebook.asgi:application"] for name, fd in fds.items()
        }
        if not options["no_worker"]:
            commands["worker"] = [sys.executable, "manage.py", "qcluster"]
        procs: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for name, cmd in commands.items():
                procs[name] = subprocess.Popen(
                    cmd,
                    env=env,
                    cwd=settings.BASE_DIR,
                    pass_fds=(fds[name],) if name in fds else (),
                    process_group=0,  # out of our group: the terminal's Ctrl-C is for us
                )
            # The children hold the sockets now: a web process that dies takes its socket
            # with it, and the kernel stops sending connections there.
            for sock in listeners:
                sock.close()
            webs = [p for name, p in procs.items() if name.startswith("web")]
            if _wait_for_http(host, port, webs, timeout=120):
                shown = f"[{host}]" if ":" in host else host
                self.stdout.write(f"Web processes: {count} (WEB_PROCESSES)")
                self.stdout.write(
                    self.style.SUCCESS(f"Notebook is running at http://{shown}:{port}/")
                )
                self.stdout.write("Press Ctrl-C to stop.")
            while all(p.poll() is None for p in procs.values()):
                time.sleep(0.5)
            dead = [name for name, p in procs.items() if p.poll() is not None]
            raise CommandError(
                f"The {', '.join(dead)} process stopped unexpectedly; shutting down."
            )
        except KeyboardInterrupt:
            self.stdout.write("\nStopping…")
        finally:
            self._stop(procs)
            for sock in listeners:
                sock.close()

    def _stop(self, procs: dict[str, subprocess.Popen[bytes]]) -> None:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + SHUTDOWN_GRACE_SECONDS
        try:
            for name, p in procs.items():
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.stderr.write(
                        f"{name} did not stop in {SHUTDOWN_GRACE_SECONDS}s; killing it."
                    )
        except KeyboardInterrupt:
            self.stderr.write("Interrupted again; killing.")
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
