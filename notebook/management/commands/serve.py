"""`manage.py serve`: the whole app in the foreground (what `make run` starts).

Prepares the database (the embedded server is started by settings when DATABASE_URL is unset),
applies migrations, collects static files, then runs the ASGI web server (daphne, through
notebook.daphne_http) and a django-q2 worker as child processes. Ctrl-C stops all of them, then
the embedded server. The web server loads the embedding model in a background thread as it
starts (notebook.asgi; EMBEDDING_WARM_UP): searches before it is ready use keywords only.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from notebook import metrics
from notebook.database import database_url

SHUTDOWN_GRACE_SECONDS = 15


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def _wait_for_port(host: str, port: int, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = "Run Notebook: migrate, collect static files, start the web server and a worker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--no-worker", action="store_true", help="Start the web server only.")

    def handle(self, *args: Any, **options: Any) -> None:
        host: str = options["host"]
        port: int = options["port"]
        if _port_in_use(host, port):
            raise CommandError(
                f"Port {port} on {host} is in use. Stop what runs there or set PORT=…."
            )

        db = settings.DATABASES["default"]
        self.stdout.write(f"Database: {db['NAME']} on {db['HOST'] or 'localhost'}")
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        connection.close()
        metrics.reset_directory()  # this machine's samples start from zero with its processes

        # Children connect to the same server directly; only this process owns the embedded one.
        env = {**os.environ, "DATABASE_URL": database_url(db)}
        commands = {
            # daphne, answering 414/431 for requests over Twisted's size limits.
            "web": [
                sys.executable,
                "-m",
                "notebook.daphne_http",
                "-b",
                host,
                "-p",
                str(port),
                "notebook.asgi:application",
            ],
        }
        if not options["no_worker"]:
            commands["worker"] = [sys.executable, "manage.py", "qcluster"]
        procs: dict[str, subprocess.Popen[bytes]] = {}
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)  # `kill` stops us like Ctrl-C
        try:
            for name, cmd in commands.items():
                procs[name] = subprocess.Popen(cmd, env=env, cwd=settings.BASE_DIR)
            if _wait_for_port(host, port, procs["web"], timeout=60):
                shown = f"[{host}]" if ":" in host else host
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
        self.stdout.write("Stopped.")

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
