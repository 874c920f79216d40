"""Load benchmark: users logging in, uploading PDFs and chatting over WebSockets at the same time.

    .venv/bin/python bench/load.py [--users 50] [--questions 5] [--idle 200] [--active 20]
        [--files a.pdf,b.pdf,...] [--pdfs DIR] [--questions-file FILE] [--poll-seconds S]
        [--answer-timeout S] [--seed N] [--json OUT.json] [--max-seconds S] [--keep-data]

Starts the app the way `make run` does (`manage.py serve`: daphne and a django-q2 worker on the
embedded PostgreSQL) in a fresh temporary DATA_DIR on a free loopback port, with the offline
extractive answerer (no CHAT_MODEL) and the per-user question and upload rate limits raised, and
talks to it only as browsers and scripts would, over HTTP and WebSocket:

1. --users users (created beforehand with `manage.py shell`) log in through the login form,
   create a notebook and a note (REST API, session + CSRF), upload two of the eval PDFs (one
   request each; the pair rotates through --files), poll the API until both are ready or
   failed, then ask --questions questions about them one after another on the conversation's
   WebSocket, timing the first token and the finished answer.
2. --idle WebSockets are opened on idle conversations of the same users and held while
   --active users ask --questions more questions concurrently; at the end every idle socket
   must still answer a ping.

Memory: RSS summed over the web (daphne), worker (qcluster and its children) and PostgreSQL
process trees, sampled every 0.5 s (PSS every 5 s), peak per phase. Results go to stdout,
progress to stderr (server output to DATA_DIR/../serve.log), --json OUT for everything.
--max-seconds bounds the whole run; that deadline, Ctrl-C or SIGTERM stop the server (SIGINT as
Ctrl-C would, then its process group and PostgreSQL if they outlive it) and delete the
temporary directory unless --keep-data.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.cookiejar
import json
import math
import os
import platform
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil
from autobahn.asyncio.websocket import WebSocketClientFactory, WebSocketClientProtocol

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `bench` importable
    sys.path.insert(0, str(REPO))

from bench.ingest import log, select_files  # noqa: E402

DEFAULT_PDFS = REPO.parent / "shared" / "eval" / "pdfs"
DEFAULT_QUESTIONS = REPO.parent / "shared" / "eval" / "questions.jsonl"
# Small files, so that the run is about concurrency rather than one long ingestion.
DEFAULT_FILES = "R-data.pdf,natbib.pdf,lilypond-essay.de.pdf,url.pdf"
RAISED_RATE = "10000/m"
TEARDOWN_MARGIN_S = 60  # kept out of --max-seconds for stopping the server
SERVER_START_TIMEOUT_S = 240
STOP_GRACE_S = 45  # serve gives its children 15 s, then stops PostgreSQL
SAMPLE_S = 0.5
PSS_EVERY = 10  # samples: PSS reads every mapping of every process, so less often
TIMELINE_EVERY = 10
HTTP_TIMEOUT_S = 120
WS_OPEN_TIMEOUT_S = 30
PING_TIMEOUT_S = 10
IDLE_OPEN_CONCURRENCY = 20
PROGRESS_EVERY_S = 30
ATTACHMENT_DONE = ("ready", "failed", "needs_password")
ANSWER_IN_PROGRESS = ("pending", "streaming")
TREES = ("web", "worker", "postgres")

T = TypeVar("T")


class LoadError(Exception):
    """A step of a simulated user failed; `kind` groups it in the report (no ids in it)."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


# --- Figures ---------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def distribution(values: list[float]) -> dict[str, Any]:
    def r(v: float | None) -> float | None:
        return None if v is None else round(v, 3)

    return {
        "n": len(values),
        "p50": r(percentile(values, 50)),
        "p95": r(percentile(values, 95)),
        "max": r(max(values) if values else None),
    }


@dataclass
class Answer:
    user: str
    question: str
    status: str = ""  # the answer's final status (complete, error, interrupted), "" if none
    ttft: float | None = None  # seconds from sending the question to the first token
    total: float | None = None  # ... to the finished answer
    sources: int = 0
    error: str = ""  # what went wrong, as a kind without ids ("" if complete)
    detail: str = ""


@dataclass
class PhaseStats:
    name: str
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None
    loadavg_before: tuple[float, ...] = field(default_factory=os.getloadavg)
    loadavg_after: tuple[float, ...] = ()
    logins_planned: int = 0
    logins: list[float] = field(default_factory=list)
    attachments_planned: int = 0
    attachment_status: Counter[str] = field(default_factory=Counter)
    upload_request: list[float] = field(default_factory=list)
    upload_ready: list[float] = field(default_factory=list)  # client: POST sent → poll sees it
    upload_ready_server: list[float] = field(default_factory=list)  # created_at → ready_at
    answers_planned: int = 0
    answers: list[Answer] = field(default_factory=list)
    idle_planned: int = 0
    idle_connect: list[float] = field(default_factory=list)
    idle_alive: int | None = None
    # Every HTTP request but the login POST and uploads: pages, API calls, polls (seconds).
    pages: list[float] = field(default_factory=list)
    login_window: list[float] = field(default_factory=list)  # first start, last end
    errors: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    cpu_before: dict[str, float] = field(default_factory=dict)  # MemorySampler.cpu_seconds
    cpu_after: dict[str, float] = field(default_factory=dict)

    def error(self, kind: str, detail: str = "") -> None:
        self.errors[kind] += 1
        if detail and kind not in self.examples:
            self.examples[kind] = detail[:500]

    def finish(self) -> None:
        if self.ended is None:
            self.ended = time.perf_counter()
            self.loadavg_after = os.getloadavg()

    def progress(self) -> str:
        done = sum(1 for a in self.answers if a.status)
        parts = [f"{self.name}: {time.perf_counter() - self.started:.0f}s"]
        if self.logins_planned:
            parts.append(f"logged in {len(self.logins)}/{self.logins_planned}")
        if self.attachments_planned:
            parts.append(
                f"attachments ready {self.attachment_status['ready']}/{self.attachments_planned}"
            )
        if self.idle_planned:
            parts.append(f"idle sockets {len(self.idle_connect)}/{self.idle_planned}")
        parts.append(f"answers {done}/{self.answers_planned}")
        if self.errors:
            parts.append(f"errors {sum(self.errors.values())}")
        return ", ".join(parts)

    def summary(self) -> dict[str, Any]:
        complete = [a for a in self.answers if a.status == "complete"]
        out: dict[str, Any] = {
            "wall_seconds": round((self.ended or time.perf_counter()) - self.started, 1),
            "loadavg_before": self.loadavg_before,
            "loadavg_after": self.loadavg_after,
        }
        if self.cpu_before and self.cpu_after:
            out["cpu_seconds"] = {
                k: round(self.cpu_after[k] - v, 1)
                for k, v in self.cpu_before.items()
                if k in self.cpu_after
            }
        if self.logins_planned:
            out["logins"] = {"ok": len(self.logins), "planned": self.logins_planned}
            out["login_seconds"] = distribution(self.logins)
            if len(self.login_window) == 2 and self.logins:
                span = self.login_window[1] - self.login_window[0]
                out["logins_per_second"] = round(len(self.logins) / span, 2) if span else None
        out["page_seconds"] = distribution(self.pages)
        if self.attachments_planned:
            out["attachments"] = {
                "ready": self.attachment_status["ready"],
                "planned": self.attachments_planned,
                "by_status": dict(self.attachment_status),
            }
            out["upload_request_seconds"] = distribution(self.upload_request)
            out["upload_to_ready_seconds"] = distribution(self.upload_ready)
            out["upload_to_ready_server_seconds"] = distribution(self.upload_ready_server)
        if self.idle_planned:
            out["idle"] = {
                "planned": self.idle_planned,
                "opened": len(self.idle_connect),
                "alive_at_end": self.idle_alive,
                "connect_seconds": distribution(self.idle_connect),
            }
        out["answers"] = {
            "complete": len(complete),
            "planned": self.answers_planned,
            "by_status": dict(Counter(a.status or "none" for a in self.answers)),
            "with_citations": sum(1 for a in complete if a.sources),
            "without_streamed_tokens": sum(1 for a in complete if a.ttft is None),
        }
        out["first_token_seconds"] = distribution([a.ttft for a in complete if a.ttft is not None])
        out["complete_seconds"] = distribution([a.total for a in complete if a.total is not None])
        out["errors"] = dict(self.errors.most_common())
        out["error_examples"] = self.examples
        return out


# --- The server: `manage.py serve` in a fresh DATA_DIR ----------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(data_dir: Path, port: int) -> dict[str, str]:
    """The developer's environment with everything that could reach beyond this machine or this
    DATA_DIR switched off (empty values also win over a `.env`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "CSRF_TRUSTED_ORIGINS")}
    env.update(
        {
            "DATA_DIR": str(data_dir),
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "PYTHONUNBUFFERED": "1",
            "DEBUG": "false",
            "DATABASE_URL": "",
            "REDIS_URL": "",
            "TASK_BROKER": "orm",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "SECURE_COOKIES": "false",
            "SECURE_SSL_REDIRECT": "false",
            "BEHIND_TLS_PROXY": "false",
            "CHAT_MODEL": "",  # the offline extractive answerer
            "EMBEDDING_BACKEND": "local",
            "RERANKER": "none",
            "CHAT_RATE_LIMIT": RAISED_RATE,
            "UPLOAD_RATE_LIMIT": RAISED_RATE,
        }
    )
    return env


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    data_dir: Path
    log_path: Path
    env: dict[str, str]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "postgres"


def start_server(work: Path) -> Server:
    """`manage.py serve` in its own session (so a Ctrl-C meant for us reaches it only through
    stop_server, and its whole process group can be killed), output to work/serve.log."""
    port = free_port()
    data_dir = work / "data"
    env = server_env(data_dir, port)
    log_path = work / "serve.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "serve"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Server(proc, port, data_dir, log_path, env)


async def wait_until_running(server: Server) -> float:
    started = time.perf_counter()
    needle = f"Notebook is running at http://127.0.0.1:{server.port}/"
    while time.perf_counter() - started < SERVER_START_TIMEOUT_S:
        if server.proc.poll() is not None:
            raise RuntimeError(f"serve exited with {server.proc.returncode}:\n{tail(server)}")
        if needle in server.log_path.read_text(errors="replace"):
            return time.perf_counter() - started
        await asyncio.sleep(0.5)
    raise RuntimeError(f"serve not running after {SERVER_START_TIMEOUT_S}s:\n{tail(server)}")


def tail(server: Server, lines: int = 40) -> str:
    return "\n".join(server.log_path.read_text(errors="replace").splitlines()[-lines:])


# One hash for every user (hashing is slow and the same password): each login still checks it.
CREATE_USERS = """
import os
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
User = get_user_model()
names = os.environ["LOAD_USERNAMES"].split(",")
password = make_password(os.environ["LOAD_PASSWORD"])
User.objects.bulk_create([User(username=name, password=password) for name in names])
print(User.objects.filter(username__in=names).count())
# The hasher's own cost, as a login pays it (one check, one thread), for the login ceiling.
import time
from django.contrib.auth.hashers import check_password
costs = []
for _ in range(5):
    t0 = time.perf_counter()
    assert check_password(os.environ["LOAD_PASSWORD"], password)
    costs.append(time.perf_counter() - t0)
print(sorted(costs)[2])
"""


async def create_users(server: Server, names: list[str], password: str) -> float:
    """Through `manage.py shell`, which attaches to the running embedded server. Returns the
    median seconds of one password check there (the hasher's cost on this machine now)."""
    env = {**server.env, "LOAD_USERNAMES": ",".join(names), "LOAD_PASSWORD": password}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "manage.py",
        "shell",
        "--no-imports",
        "-c",
        CREATE_USERS,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 300)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        raise
    lines = out.decode().split()
    if proc.returncode != 0 or len(lines) != 2 or lines[0] != str(len(names)):
        raise RuntimeError(f"creating users failed ({proc.returncode}): {out!r} {err.decode()}")
    return float(lines[1])


def postmaster_pid(pgdata: Path) -> int | None:
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if psutil.pid_exists(pid) else None


def stop_server(server: Server) -> dict[str, Any]:
    """Ctrl-C for serve (it stops daphne, the worker, then PostgreSQL); whatever outlives the
    grace period is killed, PostgreSQL last (fast shutdown first)."""
    result: dict[str, Any] = {}
    started = time.perf_counter()
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGINT)
        try:
            server.proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            result["serve_killed"] = True
            log(f"serve still running {STOP_GRACE_S}s after SIGINT: killing its process group")
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server.proc.pid, signal.SIGKILL)  # and any child that outlived serve
        result.setdefault("group_killed", True)
    server.proc.wait()
    result["serve_exit_code"] = server.proc.returncode
    pid = postmaster_pid(server.pgdata)
    if pid is not None:
        result["postgres_left_running"] = True
        log(f"embedded PostgreSQL (pid {pid}) still running: stopping it")
        with contextlib.suppress(psutil.Error):
            postmaster = psutil.Process(pid)
            postmaster.send_signal(signal.SIGINT)  # fast shutdown
            _, alive = psutil.wait_procs([postmaster], timeout=20)
            for p in alive:
                p.kill()
    result["postgres_running_after"] = postmaster_pid(server.pgdata) is not None
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


LOG_PROBLEM = re.compile(r"\b(ERROR|CRITICAL|Traceback|Exception)\b")


def server_log_problems(server: Server, stop_offset: int, limit: int = 60) -> dict[str, Any]:
    """Error and warning lines of the server's output (the file goes with the temporary
    directory), apart from those written once we asked it to stop (a worker killed mid-task)."""
    try:
        raw = server.log_path.read_bytes()
    except OSError:
        return {}
    out: dict[str, Any] = {}
    for part, text in (("running", raw[:stop_offset]), ("stopping", raw[stop_offset:])):
        lines = text.decode(errors="replace").splitlines()
        problems = [line for line in lines if LOG_PROBLEM.search(line)]
        warnings = [line for line in lines if "WARNING" in line]
        out[part] = {
            "lines": len(lines),
            "errors": len(problems),
            "warnings": len(warnings),
            "error_lines": problems[:limit],
            "warning_lines": warnings[:20],
        }
    return out


# --- Memory ----------------------------------------------------------------------------------


class MemorySampler(threading.Thread):
    """Sums RSS (and every PSS_EVERY samples PSS) over the web, worker and PostgreSQL process
    trees every SAMPLE_S seconds; keeps the peaks per phase and a coarse timeline."""

    def __init__(self, server: Server) -> None:
        super().__init__(name="memory-sampler", daemon=True)
        self.server = server
        self.phase = "startup"
        self.peaks: dict[str, dict[str, dict[str, float]]] = {}
        self.timeline: list[dict[str, Any]] = []
        self._stop_event = threading.Event()
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)

    def roots(self) -> dict[str, list[psutil.Process]]:
        """The web processes (one or several daphne), the worker and PostgreSQL."""
        roots: dict[str, list[psutil.Process]] = {}
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.server.proc.pid).children():
                cmdline = " ".join(child.cmdline())
                if "daphne" in cmdline:
                    roots.setdefault("web", []).append(child)
                elif "qcluster" in cmdline:
                    roots["worker"] = [child]
        pid = postmaster_pid(self.server.pgdata)
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                roots["postgres"] = [psutil.Process(pid)]
        return roots

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far by each tree (its processes alive now, and what those
        processes' children that have ended used: PostgreSQL's backends, extraction
        children), by this load generator, and by the whole machine (busy time)."""
        out: dict[str, float] = {}
        for tree, roots in self.roots().items():
            total = 0.0
            for root in roots:
                with contextlib.suppress(psutil.Error):
                    for p in [root, *root.children(recursive=True)]:
                        with contextlib.suppress(psutil.Error):
                            t = p.cpu_times()
                            total += t.user + t.system + t.children_user + t.children_system
            out[tree] = total
        me = psutil.Process().cpu_times()
        out["load generator"] = me.user + me.system
        machine = psutil.cpu_times()
        out["machine busy"] = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
        return out

    def web_rss_mb(self) -> list[float]:
        """Each web process's RSS now (MB)."""
        out = []
        for p in self.roots().get("web", []):
            with contextlib.suppress(psutil.Error):
                out.append(round(p.memory_info().rss / 2**20, 1))
        return out

    @staticmethod
    def measure(roots: list[psutil.Process], pss: bool) -> dict[str, float]:
        procs: list[psutil.Process] = []
        for root in roots:
            with contextlib.suppress(psutil.Error):
                procs += [root, *root.children(recursive=True)]
        if not procs:
            return {}
        rss = pss_total = 0.0
        count = 0
        for p in procs:
            try:
                if pss:
                    full = p.memory_full_info()
                    rss += full.rss
                    pss_total += full.pss
                else:
                    rss += p.memory_info().rss
                count += 1
            except psutil.Error:  # exited meanwhile
                continue
        out = {"rss_mb": rss / 2**20, "processes": float(count)}
        if pss:
            out["pss_mb"] = pss_total / 2**20
        return out

    def run(self) -> None:
        n = 0
        while not self._stop_event.wait(SAMPLE_S if n else 0):
            pss = n % PSS_EVERY == 0
            sample = {name: self.measure(root, pss) for name, root in self.roots().items()}
            peaks = self.peaks.setdefault(self.phase, {})
            for name, figures in sample.items():
                tree = peaks.setdefault(name, {})
                for key, value in figures.items():
                    tree[key] = max(tree.get(key, 0.0), value)
            if n % TIMELINE_EVERY == 0:
                self.timeline.append(
                    {
                        "t": round(time.perf_counter() - self._t0, 1),
                        "phase": self.phase,
                        **{k: round(v.get("rss_mb", 0.0)) for k, v in sample.items()},
                    }
                )
            n += 1

    def summary(self) -> dict[str, Any]:
        return {
            phase: {
                tree: {k: round(v, 1) if k != "processes" else int(v) for k, v in figures.items()}
                for tree, figures in trees.items()
            }
            for phase, trees in self.peaks.items()
        }


# --- HTTP as a browser (session cookie + CSRF) -----------------------------------------------


def multipart(field_name: str, files: Iterable[tuple[str, bytes, str]]) -> tuple[bytes, str]:
    """A multipart/form-data body with the files under one field, and its Content-Type."""
    boundary = uuid.uuid4().hex
    body = bytearray()
    for name, content, content_type in files:
        quoted = name.replace('"', "%22")
        body += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{field_name}"; '
            f'filename="{quoted}"\r\nContent-Type: {content_type}\r\n\r\n'
        ).encode()
        body += content + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return bytes(body), f"multipart/form-data; boundary={boundary}"


CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


class Http:
    """One browser: its own cookie jar; blocking calls, run on the bench's thread pool."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.pages: list[float] | None = None  # where to put page timings (the phase's)

    def send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        request = urllib.request.Request(  # noqa: S310 - always http://127.0.0.1
            self.base + path, data=body, method=method, headers=headers or {}
        )
        started = time.perf_counter()
        try:
            with self.opener.open(request, timeout=HTTP_TIMEOUT_S) as response:
                result = int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                result = exc.code, exc.read()
        # Page loads: everything but the login POST (a password hash) and uploads.
        heavy = method == "POST" and (path == "/accounts/login/" or path.endswith("/attachments"))
        if self.pages is not None and not heavy:
            self.pages.append(time.perf_counter() - started)
        return result

    def cookie(self, name: str) -> str:
        return next((c.value or "" for c in self.jar if c.name == name), "")

    def cookie_header(self) -> str:
        return "; ".join(f"{c.name}={c.value}" for c in self.jar)

    def login(self, username: str, password: str) -> None:
        """The login page, then its form posted with the CSRF token; the redirect to the
        notebook list is followed, as a browser does."""
        status, page = self.send("GET", "/accounts/login/")
        match = CSRF_INPUT.search(page.decode(errors="replace"))
        if status != 200 or not match:
            raise LoadError(f"login page: HTTP {status}", page[:300].decode(errors="replace"))
        form = {
            "csrfmiddlewaretoken": match.group(1),
            "username": username,
            "password": password,
            "next": "",
        }
        status, page = self.send(
            "POST",
            "/accounts/login/",
            urllib.parse.urlencode(form).encode(),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )
        if status != 200 or not self.cookie("sessionid"):
            raise LoadError(f"login: HTTP {status}", page[:300].decode(errors="replace"))

    def api(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        headers = {"Accept": "application/json", "X-CSRFToken": self.cookie("csrftoken")}
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        return self._json(f"{method} {route(path)}", *self.send(method, path, body, headers))

    def upload(self, note_id: int, name: str, content: bytes) -> Any:
        body, content_type = multipart("files", [(name, content, "application/pdf")])
        headers = {
            "Accept": "application/json",
            "X-CSRFToken": self.cookie("csrftoken"),
            "Content-Type": content_type,
        }
        path = f"/api/notes/{note_id}/attachments"
        return self._json(f"POST {route(path)}", *self.send("POST", path, body, headers))

    @staticmethod
    def _json(step: str, status: int, raw: bytes) -> Any:
        if status >= 300:
            raise LoadError(f"{step}: HTTP {status}", raw[:500].decode(errors="replace"))
        return json.loads(raw) if raw else None


def route(path: str) -> str:
    """`/api/notes/12/attachments` → `/api/notes/{id}/attachments`: error kinds without ids."""
    return re.sub(r"/\d+", "/{id}", path.split("?")[0])


# --- WebSocket chat (what static/js/chat.js and htmx's ws extension do) -----------------------


class ChatSocket(WebSocketClientProtocol):
    """Queues every text frame; None once the socket is closed."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: asyncio.Queue[str | None] = asyncio.Queue()
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ponged = asyncio.Event()
        self.closed = False
        self.close_code: int | None = None

    def onOpen(self) -> None:
        if not self.opened.done():
            self.opened.set_result(None)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        self.frames.put_nowait(payload.decode("utf-8", errors="replace"))

    def onPong(self, payload: bytes) -> None:
        self.ponged.set()

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        self.closed = True
        self.close_code = code
        if not self.opened.done():
            self.opened.set_exception(LoadError("ws handshake refused", f"{code} {reason}"))
        self.frames.put_nowait(None)

    def drain(self) -> None:
        while not self.frames.empty():
            if self.frames.get_nowait() is None:
                self.frames.put_nowait(None)  # keep the end marker for the next reader
                return

    async def alive(self) -> bool:
        """Still open, and the server answers a ping."""
        if self.closed:
            return False
        self.ponged.clear()
        self.sendPing(b"load")
        try:
            await asyncio.wait_for(self.ponged.wait(), PING_TIMEOUT_S)
        except TimeoutError:
            return False
        return not self.closed


async def open_socket(port: int, conversation_id: int, cookies: str) -> ChatSocket:
    url = f"ws://127.0.0.1:{port}/ws/chat/{conversation_id}/"
    factory = WebSocketClientFactory(  # type: ignore[no-untyped-call]  # autobahn
        url, origin=f"http://127.0.0.1:{port}", headers={"Cookie": cookies}
    )
    factory.protocol = ChatSocket
    loop = asyncio.get_running_loop()
    try:
        _, protocol = await asyncio.wait_for(
            loop.create_connection(factory, "127.0.0.1", port), WS_OPEN_TIMEOUT_S
        )
        assert isinstance(protocol, ChatSocket)
        await asyncio.wait_for(protocol.opened, WS_OPEN_TIMEOUT_S)
    except TimeoutError:
        raise LoadError("ws open: timed out") from None
    except OSError as exc:
        raise LoadError(f"ws open: {type(exc).__name__}", str(exc)) from None
    return protocol


@dataclass(frozen=True)
class Frame:
    """What one server frame means for the question in flight."""

    refused: str | None = None  # the ask form came back with an error
    answer_id: int | None = None  # the new answer's placeholder was shown
    token_for: int | None = None  # a piece of the answer
    final_id: int | None = None  # the answer rendered again, finished
    final_status: str = ""
    error: str = ""
    sources: int = 0


ASSISTANT_ARTICLE = re.compile(r'<article id="message-(\d+)" class="message message-assistant')
LEADING_ARTICLE = re.compile(
    r'^<article id="message-(\d+)" class="message message-assistant status-(\w+)"'
)
TOKEN_SPAN = re.compile(r'^<span id="message-(\d+)-text" hx-swap-oob="beforeend">')
ERROR_TEXT = re.compile(r'class="error-text"[^>]*>(.*?)</p>', re.S)
ALERT = re.compile(r'role="alert"[^>]*>(.*?)</(?:div|p)>', re.S)
TAGS = re.compile(r"<[^>]+>")


def parse_frame(html: str) -> Frame:
    """Classify a frame of chat/consumers.py: the ask form, the question and its placeholder
    (`message-list`), a token, or the finished answer (an assistant article, not in progress)."""
    if html.startswith('<form id="ask-form"'):
        alert = ALERT.search(html)
        if alert:
            return Frame(refused=TAGS.sub("", alert.group(1)).strip() or "refused")
        return Frame()
    if 'id="message-list"' in html:
        shown = ASSISTANT_ARTICLE.search(html)
        return Frame(answer_id=int(shown.group(1))) if shown else Frame()
    token = TOKEN_SPAN.match(html)
    if token:
        return Frame(token_for=int(token.group(1)))
    article = LEADING_ARTICLE.match(html)
    if article and article.group(2) not in ANSWER_IN_PROGRESS:
        error = ERROR_TEXT.search(html)
        return Frame(
            final_id=int(article.group(1)),
            final_status=article.group(2),
            error=TAGS.sub("", error.group(1)).strip() if error else "",
            sources=html.count('data-testid="source"'),
        )
    return Frame()


async def ask(sock: ChatSocket, user: str, question: str, timeout: float) -> Answer:
    """Send one question as the page's ask form does and follow its answer to the end."""
    answer = Answer(user=user, question=question)
    sock.drain()
    started = time.perf_counter()
    payload = json.dumps({"action": "ask", "content": question}).encode()
    sock.sendMessage(payload)  # type: ignore[no-untyped-call]  # autobahn
    answer_id: int | None = None  # known from the placeholder (or, failing that, a token)
    while True:
        remaining = started + timeout - time.perf_counter()
        try:
            html = await asyncio.wait_for(sock.frames.get(), max(remaining, 0.001))
        except TimeoutError:
            answer.error = "answer timed out"
            answer.detail = f"no finished answer after {timeout:.0f}s (message {answer_id})"
            return answer
        if html is None:
            answer.error = "socket closed during an answer"
            answer.detail = f"close code {sock.close_code}"
            return answer
        frame = parse_frame(html)
        if frame.refused is not None:
            answer.error, answer.detail = "question refused", frame.refused
            return answer
        answer_id = answer_id or frame.answer_id or frame.token_for
        if frame.token_for is not None and frame.token_for == answer_id and answer.ttft is None:
            answer.ttft = time.perf_counter() - started
        if frame.final_id is not None and answer_id in (None, frame.final_id):
            answer.total = time.perf_counter() - started
            answer.status = frame.final_status
            answer.sources = frame.sources
            if frame.final_status != "complete":
                answer.error = f"answer {frame.final_status}"
                answer.detail = f"message {frame.final_id}: {frame.error}"
            return answer


# --- The simulated users ---------------------------------------------------------------------


@dataclass
class SimUser:
    username: str
    files: list[Path]
    questions: list[str]  # this user's shuffled pool; phases take consecutive slices
    http: Http
    notebook_id: int | None = None

    def take(self, start: int, count: int) -> list[str]:
        return [self.questions[(start + k) % len(self.questions)] for k in range(count)]


@dataclass
class Run:
    """What every coroutine needs: the server, the pool for blocking HTTP, the options."""

    server: Server
    password: str
    pool: ThreadPoolExecutor
    pdf_bytes: dict[str, bytes]
    questions: int
    poll_seconds: float
    answer_timeout: float

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)


def question_pools(
    path: Path, files: list[Path], users: int, pair: int, rng: random.Random
) -> list[tuple[list[Path], list[str]]]:
    """Per user: `pair` consecutive files of the rotation and, shuffled, the eval questions
    about them (all questions if none are about them)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out = []
    for i in range(users):
        mine = [files[(i + k) % len(files)] for k in range(min(pair, len(files)))]
        names = {f.name for f in mine}
        pool = [r["question"] for r in rows if r.get("file") in names and r.get("question")]
        pool = pool or [r["question"] for r in rows if r.get("question")]
        rng.shuffle(pool)
        out.append((mine, pool))
    return out


async def converse(
    run: Run, user: SimUser, conversation_id: int, questions: list[str], stats: PhaseStats
) -> None:
    """One socket, the questions one after another (as a person waits for each answer)."""
    sock = await open_socket(run.server.port, conversation_id, user.http.cookie_header())
    try:
        for question in questions:
            answer = await ask(sock, user.username, question, run.answer_timeout)
            stats.answers.append(answer)
            if answer.error:
                stats.error(answer.error, f"{user.username}: {answer.detail} ({question})")
            if sock.closed:
                break
    finally:
        if not sock.closed:
            sock.sendClose(1000)


async def wait_ready(
    run: Run, user: SimUser, note_id: int, sent: dict[int, float], stats: PhaseStats
) -> None:
    """Poll the note's attachments until each is ready, failed or needs a password."""
    pending = dict(sent)
    while pending:
        await asyncio.sleep(run.poll_seconds)
        rows = await run.call(user.http.api, "GET", f"/api/notes/{note_id}/attachments")
        now = time.perf_counter()
        for row in rows:
            started = pending.get(row["id"])
            if started is None or row["status"] not in ATTACHMENT_DONE:
                continue
            del pending[row["id"]]
            stats.attachment_status[row["status"]] += 1
            if row["status"] == "ready":
                stats.upload_ready.append(now - started)
                if row.get("ready_at"):
                    server_s = _iso(row["ready_at"]) - _iso(row["created_at"])
                    stats.upload_ready_server.append(server_s)
            else:
                stats.error(
                    f"attachment {row['status']}",
                    f"{user.username} {row['original_name']}: {row.get('error', '')}",
                )


def _iso(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


async def phase1_user(run: Run, user: SimUser, stats: PhaseStats) -> None:
    """Log in, notebook + note, two uploads, wait for ready, then the questions."""
    started = time.perf_counter()
    if not stats.login_window:
        stats.login_window = [started, started]
    await run.call(user.http.login, user.username, run.password)
    stats.logins.append(time.perf_counter() - started)
    stats.login_window[1] = max(stats.login_window[1], time.perf_counter())
    notebook = await run.call(
        user.http.api, "POST", "/api/notebooks", {"title": f"Load test of {user.username}"}
    )
    names = [f.name for f in user.files]
    user.notebook_id = int(notebook["id"])
    note = await run.call(
        user.http.api,
        "POST",
        f"/api/notebooks/{user.notebook_id}/notes",
        {"title": "Sources", "body": f"Reading notes about {', '.join(names)}."},
    )
    status, _ = await run.call(user.http.send, "GET", f"/notes/{note['id']}/")  # the note page
    if status != 200:
        stats.error(f"note page: HTTP {status}")
    sent: dict[int, float] = {}
    for path in user.files:
        t0 = time.perf_counter()
        try:
            body = await run.call(user.http.upload, note["id"], path.name, run.pdf_bytes[path.name])
        except LoadError as exc:
            stats.error(exc.kind, f"{user.username} {path.name}: {exc.detail}")
            continue
        stats.upload_request.append(time.perf_counter() - t0)
        for row in body["attachments"]:
            sent[int(row["id"])] = t0
        for refused in body["errors"]:
            stats.error(f"upload refused: {refused['code']}", f"{user.username}: {refused}")
    await wait_ready(run, user, int(note["id"]), sent, stats)
    conversation = await run.call(
        user.http.api, "POST", "/api/conversations", {"notebook_id": user.notebook_id}
    )
    await converse(run, user, int(conversation["id"]), user.take(0, run.questions), stats)


async def guarded(stats: PhaseStats, user: str, work: Awaitable[None]) -> None:
    """Run one user's part; a failure ends that user only and is counted by kind."""
    try:
        await work
    except LoadError as exc:
        stats.error(exc.kind, f"{user}: {exc.detail}")
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        stats.error(f"{type(exc).__name__}", f"{user}: {exc}")


async def phase1(run: Run, users: list[SimUser], stats: PhaseStats) -> None:
    stats.logins_planned = len(users)
    stats.attachments_planned = sum(len(u.files) for u in users)
    stats.answers_planned = len(users) * run.questions
    for u in users:
        u.http.pages = stats.pages
    await asyncio.gather(*(guarded(stats, u.username, phase1_user(run, u, stats)) for u in users))


async def phase2(run: Run, users: list[SimUser], idle: int, active: int, stats: PhaseStats) -> None:
    """Idle sockets opened and held, then the active users' questions, then a ping on each
    idle socket."""
    ready = [u for u in users if u.notebook_id is not None]
    for u in users:
        u.http.pages = stats.pages
    stats.idle_planned = idle
    stats.answers_planned = active * run.questions
    if not ready:
        stats.error("no user got through phase 1")
        return
    hosts = ready[: min(len(ready), idle)]
    idle_conversations: dict[str, int] = {}

    async def idle_conversation(user: SimUser) -> None:
        conversation = await run.call(
            user.http.api,
            "POST",
            "/api/conversations",
            {"notebook_id": user.notebook_id, "title": "Left open"},
        )
        idle_conversations[user.username] = int(conversation["id"])

    await asyncio.gather(*(guarded(stats, u.username, idle_conversation(u)) for u in hosts))
    hosts = [u for u in hosts if u.username in idle_conversations]
    sockets: list[ChatSocket] = []
    gate = asyncio.Semaphore(IDLE_OPEN_CONCURRENCY)

    async def open_idle(i: int) -> None:
        user = hosts[i % len(hosts)]
        async with gate:
            t0 = time.perf_counter()
            sock = await open_socket(
                run.server.port, idle_conversations[user.username], user.http.cookie_header()
            )
        stats.idle_connect.append(time.perf_counter() - t0)
        sockets.append(sock)

    try:
        if hosts:
            await asyncio.gather(
                *(guarded(stats, f"idle socket {i}", open_idle(i)) for i in range(idle))
            )
        log(f"phase 2: {len(sockets)}/{idle} idle sockets open; {active} users start asking")

        async def ask_again(user: SimUser) -> None:
            conversation = await run.call(
                user.http.api,
                "POST",
                "/api/conversations",
                {"notebook_id": user.notebook_id, "title": "Phase 2"},
            )
            questions = user.take(run.questions, run.questions)
            await converse(run, user, int(conversation["id"]), questions, stats)

        await asyncio.gather(*(guarded(stats, u.username, ask_again(u)) for u in ready[:active]))
        alive = await asyncio.gather(*(s.alive() for s in sockets))
        stats.idle_alive = sum(alive)
        if stats.idle_alive < len(sockets):
            codes = Counter(s.close_code for s in sockets if s.closed)
            stats.error("idle socket lost", f"close codes: {dict(codes)}")
    finally:
        for sock in sockets:
            if not sock.closed:
                sock.sendClose(1000)


async def progress(phases: dict[str, PhaseStats]) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        current = next((p for p in reversed(phases.values()) if p.ended is None), None)
        if current is not None:
            log(current.progress())


async def scenario(
    args: argparse.Namespace,
    work: Path,
    box: dict[str, Any],
    phases: dict[str, PhaseStats],
    report: dict[str, Any],
) -> None:
    files = select_files(args.pdfs, args.files)
    rng = random.Random(args.seed)  # noqa: S311 - benchmark data, not secrets
    names = [f"load{i:03d}" for i in range(1, args.users + 1)]
    pools = question_pools(args.questions_file, files, args.users, 2, rng)

    log(f"starting `manage.py serve` in {work}")
    server = start_server(work)
    box["server"] = server
    sampler = MemorySampler(server)
    sampler.start()
    box["sampler"] = sampler
    report["server_start_seconds"] = round(await wait_until_running(server), 1)
    log(f"serving on {server.base} after {report['server_start_seconds']}s")

    password = secrets.token_urlsafe(16)
    t0 = time.perf_counter()
    report["hasher_seconds"] = round(await create_users(server, names, password), 3)
    report["create_users_seconds"] = round(time.perf_counter() - t0, 1)
    log(f"{len(names)} users created in {report['create_users_seconds']}s")

    # Blocking HTTP calls run here, one thread per user at most (the default pool has 6).
    pool = ThreadPoolExecutor(max_workers=args.users + 8, thread_name_prefix="http")
    box["pool"] = pool
    run = Run(
        server=server,
        password=password,
        pool=pool,
        pdf_bytes={f.name: f.read_bytes() for f in files},
        questions=args.questions,
        poll_seconds=args.poll_seconds,
        answer_timeout=args.answer_timeout,
    )
    users = [
        SimUser(name, mine, pool_questions, Http(server.base))
        for name, (mine, pool_questions) in zip(names, pools, strict=True)
    ]

    reporter = asyncio.create_task(progress(phases))
    try:
        report["web_rss_before_mb"] = sampler.web_rss_mb()
        sampler.phase = "phase1"
        phases["phase1"] = stats1 = PhaseStats("phase 1", cpu_before=sampler.cpu_seconds())
        log(f"phase 1: {args.users} users, {args.questions} questions each")
        try:
            await phase1(run, users, stats1)
        finally:
            stats1.finish()
            stats1.cpu_after = sampler.cpu_seconds()
        log(stats1.progress())

        if args.idle or args.active:
            sampler.phase = "phase2"
            phases["phase2"] = stats2 = PhaseStats("phase 2", cpu_before=sampler.cpu_seconds())
            log(f"phase 2: {args.idle} idle sockets + {args.active} users asking")
            try:
                await phase2(run, users, args.idle, min(args.active, args.users), stats2)
            finally:
                stats2.finish()
                stats2.cpu_after = sampler.cpu_seconds()
            log(stats2.progress())
        sampler.phase = "end"
        await asyncio.sleep(5)  # answers' threads and sockets wind down
        report["web_rss_after_mb"] = sampler.web_rss_mb()
    finally:
        reporter.cancel()


async def drive(
    args: argparse.Namespace,
    work: Path,
    box: dict[str, Any],
    phases: dict[str, PhaseStats],
    report: dict[str, Any],
    budget: float,
) -> None:
    """The scenario, ended early by the deadline, SIGINT or SIGTERM (whatever was measured
    until then is kept)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def stop_on(sig: signal.Signals) -> None:
        log(f"{sig.name}: stopping")
        report.setdefault("stopped_by", sig.name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_on, sig)
    work_task = asyncio.create_task(scenario(args, work, box, phases, report))
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait(
        {work_task, stopper}, timeout=budget, return_when=asyncio.FIRST_COMPLETED
    )
    stopper.cancel()
    if work_task not in done:
        if not stop.is_set():
            log(f"deadline: --max-seconds={args.max_seconds} (less {TEARDOWN_MARGIN_S}s to stop)")
            report.setdefault("stopped_by", "deadline")
        work_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work_task
        for stats in phases.values():
            stats.finish()
    else:
        work_task.result()  # raises what the scenario raised


# --- Report ----------------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _share(n: int | None, total: int) -> str:
    if n is None:
        return "n/a"
    return f"{n} / {total} ({100 * n / total:.0f} %)" if total else f"{n} / 0"


def print_phase(title: str, s: dict[str, Any], memory: dict[str, Any]) -> None:
    print(f"== {title} ==")
    rows = [
        ("login (form + redirect)", s.get("login_seconds")),
        ("page load (not login)", s.get("page_seconds")),
        ("upload request", s.get("upload_request_seconds")),
        ("upload → ready (client)", s.get("upload_to_ready_seconds")),
        ("upload → ready (server)", s.get("upload_to_ready_server_seconds")),
        ("idle socket connect", s.get("idle", {}).get("connect_seconds")),
        ("time to first token", s.get("first_token_seconds")),
        ("time to complete", s.get("complete_seconds")),
    ]
    head = f"{'seconds':<26}{'n':>6}{'p50':>9}{'p95':>9}{'max':>9}"
    print(head)
    print("-" * len(head))
    for label, d in rows:
        if d is None:
            continue
        print(f"{label:<26}{d['n']:>6}{_s(d['p50']):>9}{_s(d['p95']):>9}{_s(d['max']):>9}")
    print("-" * len(head))
    if "logins" in s:
        print(f"logins:             {_share(s['logins']['ok'], s['logins']['planned'])}")
    if "attachments" in s:
        a = s["attachments"]
        print(f"attachments ready:  {_share(a['ready'], a['planned'])}  {a['by_status']}")
    if "idle" in s:
        i = s["idle"]
        print(
            f"idle sockets:       opened {_share(i['opened'], i['planned'])}, "
            f"still open at the end (ping answered) {_share(i['alive_at_end'], i['planned'])}"
        )
    ans = s["answers"]
    print(
        f"answers complete:   {_share(ans['complete'], ans['planned'])}  {ans['by_status']}; "
        f"with citations {ans['with_citations']}, without streamed tokens "
        f"{ans['without_streamed_tokens']}"
    )
    errors = s["errors"]
    print("errors:             " + (", ".join(f"{k} ×{n}" for k, n in errors.items()) or "none"))
    for kind, example in s["error_examples"].items():
        print(f"  e.g. {kind}: {example[:200]}")
    if memory:
        print(
            "peak memory (MB):   "
            + "; ".join(
                f"{tree} RSS {m.get('rss_mb', 0):.0f}, PSS {m.get('pss_mb', 0):.0f} "
                f"({m.get('processes', 0)} proc.)"
                for tree in TREES
                if (m := memory.get(tree))
            )
        )
    if cpu := s.get("cpu_seconds"):
        trees = ", ".join(f"{k} {v:.1f}" for k, v in cpu.items() if k != "machine busy")
        available = s["wall_seconds"] * (os.cpu_count() or 1)
        busy = cpu.get("machine busy", 0.0)
        share = f" ({busy / available:.0%})" if available else ""
        print(f"CPU seconds:        {trees}; machine busy {busy:.1f} of {available:.0f}{share}")
        if (done := ans["complete"]) and "upload_to_ready_seconds" not in s:  # no ingestion
            used = sum(v for k, v in cpu.items() if k != "machine busy")
            print(f"                    {used / done:.2f} CPU-s per complete answer, all trees")
    print(
        f"wall time:          {s['wall_seconds']:.0f} s; load average before/after "
        f"{s['loadavg_before'][0]:.1f}/{s['loadavg_after'][0] if s['loadavg_after'] else 0:.1f}"
    )
    print()


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's four figures, each beside what it is judged against in the same run."""
    phases = report.get("phases", {})
    p1 = phases.get("phase1", {})
    out: dict[str, Any] = {}
    pages = [phases[k]["page_seconds"]["p95"] for k in phases if phases[k]["page_seconds"]["n"]]
    out["page_p95_seconds"] = max(pages) if pages else None
    cost = report.get("hasher_seconds")
    cores = report["machine"]["cpu_count"] or 1
    rate = p1.get("logins_per_second")
    out["logins_per_second"] = rate
    out["hasher_seconds"] = cost
    out["login_ceiling_per_second"] = round(cores / cost, 2) if cost else None
    out["one_thread_per_second"] = round(1 / cost, 2) if cost else None
    if rate and cost:
        out["logins_vs_ceiling"] = round(rate * cost / cores, 2)
    ttft = [phases[k]["first_token_seconds"]["p95"] for k in phases]
    ttft = [t for t in ttft if t is not None]
    out["first_token_p95_seconds"] = max(ttft) if ttft else None
    out["web_rss_before_mb"] = report.get("web_rss_before_mb")
    out["web_rss_after_mb"] = report.get("web_rss_after_mb")
    return out


def print_targets(report: dict[str, Any]) -> None:
    t = report["targets"] = targets(report)
    print("== Targets (issue #18) ==")
    print(f"page loads (not login) p95: {_s(t['page_p95_seconds'])} s (target ≤ 1 s)")
    if t["hasher_seconds"]:
        print(
            f"logins: {t['logins_per_second']}/s for the burst of phase 1; one password check "
            f"costs {t['hasher_seconds']:.3f} s here (1 thread: {t['one_thread_per_second']}/s, "
            f"all {report['machine']['cpu_count']} cores: {t['login_ceiling_per_second']}/s); "
            f"logins / ceiling = {t.get('logins_vs_ceiling', 'n/a')}"
        )
    print(f"time to first token p95: {_s(t['first_token_p95_seconds'])} s (target ≤ 5 s)")
    print(
        f"web processes' RSS, MB, before phase 1 {t['web_rss_before_mb']} → after the run "
        f"{t['web_rss_after_mb']} (target ≤ 1024 each)"
    )
    print()


def print_report(report: dict[str, Any]) -> None:
    a = report["args"]
    m = report["machine"]
    print(
        f"Load bench {report['date']} at {m['commit']}: {a['users']} users × {a['questions']} "
        f"questions, then {a['idle']} idle sockets + {a['active']} active users; files "
        f"{a['files']}; {m['cpu_count']} CPUs, {m['memory_gb']} GB, WORKERS="
        f"{m['workers']}, offline extractive answerer"
    )
    if "server_start_seconds" in report:
        print(
            f"server up in {report['server_start_seconds']} s (migrate, collectstatic, daphne, "
            f"qcluster); {a['users']} users created in {report.get('create_users_seconds')} s"
        )
    print()
    memory = report.get("memory_peaks", {})
    titles = {
        "phase1": "Phase 1: log in, notebook + note, 2 uploads, wait for ready, questions "
        "one after another",
        "phase2": "Phase 2: idle sockets held + active users asking concurrently",
    }
    for key, title in titles.items():
        if key in report.get("phases", {}):
            print_phase(title, report["phases"][key], memory.get(key, {}))
    print_targets(report)
    for part, logs in report.get("server_log", {}).items():
        print(
            f"server log while {part}: {logs['lines']} lines, {logs['errors']} error lines, "
            f"{logs['warnings']} warnings"
        )
        for line in logs["error_lines"][:10] if part == "running" else []:
            print(f"  {line[:220]}")
    stop = report.get("stop", {})
    print(
        f"stopped by: {report.get('stopped_by', 'end of run')}; server stopped in "
        f"{stop.get('seconds', 'n/a')} s (exit {stop.get('serve_exit_code')}, PostgreSQL left "
        f"running: {'yes' if stop.get('postgres_left_running') else 'no'})"
    )
    if "error" in report:
        print(f"error: {report['error']}")
    print(f"run time: {report['run_seconds']:.0f} s")


def machine_info() -> dict[str, Any]:
    def git(*cmd: str) -> str:
        try:
            return subprocess.run(  # noqa: S603
                ["git", *cmd],  # noqa: S607 - read-only
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    return {
        "cpu_count": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "workers": os.environ.get("WORKERS", "2"),
        "commit": commit,
    }


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--questions", type=int, default=5, help="per user and phase")
    parser.add_argument("--idle", type=int, default=200, help="idle sockets in phase 2")
    parser.add_argument("--active", type=int, default=20, help="users asking in phase 2")
    parser.add_argument("--pdfs", type=Path, default=DEFAULT_PDFS, help="folder of the PDFs")
    parser.add_argument(
        "--files", default=DEFAULT_FILES, help="rotation of PDFs; user i uploads files i, i+1"
    )
    parser.add_argument("--questions-file", type=Path, default=DEFAULT_QUESTIONS)
    parser.add_argument("--poll-seconds", type=float, default=2.0, help="attachment polling")
    parser.add_argument("--answer-timeout", type=float, default=300.0, help="per answer")
    parser.add_argument("--seed", type=int, default=1, help="random seed (question order)")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--max-seconds", type=int, default=1500, help="stop after this long")
    parser.add_argument("--keep-data", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if args.users < 1 or args.questions < 1 or args.idle < 0 or args.active < 0:
        parser.error("--users and --questions must be positive, --idle and --active >= 0")
    if args.max_seconds <= TEARDOWN_MARGIN_S:
        parser.error(f"--max-seconds must be more than {TEARDOWN_MARGIN_S}")
    return args


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    out = args.json.resolve() if args.json else None
    work = Path(tempfile.mkdtemp(prefix="bench-load-"))
    work.chmod(0o755)  # as root the embedded server runs as another user and must get in
    report: dict[str, Any] = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine_info(),
    }
    box: dict[str, Any] = {}
    phases: dict[str, PhaseStats] = {}
    code = 0
    try:
        asyncio.run(drive(args, work, box, phases, report, args.max_seconds - TEARDOWN_MARGIN_S))
    except Exception as exc:  # report what was measured before the failure
        log(f"{type(exc).__name__}: {exc}")
        report["error"] = f"{type(exc).__name__}: {exc}"
        code = 1
    finally:
        # A second Ctrl-C must not leave PostgreSQL running: the teardown is bounded anyway.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sampler: MemorySampler | None = box.get("sampler")
        if sampler is not None:
            sampler.stop()
            report["memory_peaks"] = sampler.summary()
            report["memory_timeline"] = sampler.timeline
        server: Server | None = box.get("server")
        if server is not None:
            log("stopping the server")
            stop_offset = server.log_path.stat().st_size
            report["stop"] = stop_server(server)
            report["server_log"] = server_log_problems(server, stop_offset)
        pool: ThreadPoolExecutor | None = box.get("pool")
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        report["phases"] = {key: stats.summary() for key, stats in phases.items()}
        report["answers"] = {
            key: [a.__dict__ for a in stats.answers] for key, stats in phases.items()
        }
        if args.keep_data:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if "stopped_by" in report and code == 0:
        code = 2
    report["run_seconds"] = round(time.perf_counter() - started, 1)
    print_report(report)
    if out:
        out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        log(f"wrote {out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
