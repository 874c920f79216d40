"""Several web processes (`serve`'s WEB_PROCESSES) on one machine without Redis: the PostgreSQL
channel layer carries group messages between processes, an answer generated in one web process
reaches a socket held by another, and login lockouts and rate limits count across them."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from pathlib import Path

import psutil
import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import Client

from notebook.channel_layer import PART_BYTES, PostgresChannelLayer
from notebook.database import database_url
from notebook.management.commands.serve import balances_connections
from tests.fixtures.live import QUESTION, Socket, final
from tests.fixtures.processes import as_from_a_terminal
from tests.fixtures.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LISTEN = """
import json, sys
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

layer = get_channel_layer()
print(type(layer).__name__, flush=True)

async def go():
    channel = await layer.new_channel()
    await layer.group_add("chat.7", channel)
    print("READY", flush=True)
    for _ in range(4):
        print(json.dumps(await layer.receive(channel)), flush=True)

async_to_sync(go)()
"""


def _env(**extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "REDIS_URL": "",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("CHANNEL_LAYER", None)
    env.update(extra)
    return env


class Lines:
    """A child's output lines, read by a thread (a pipe read with a timeout)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        import queue
        import threading

        self.queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert proc.stdout is not None
        stdout = proc.stdout

        def pump() -> None:
            for line in stdout:
                self.queue.put(line.rstrip("\n"))

        threading.Thread(target=pump, daemon=True).start()

    def next(self, timeout: float) -> str:
        import queue

        try:
            line = self.queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no line from the child in {timeout}s:\n" + "\n".join(self.seen[-30:])
            ) from None
        self.seen.append(line)
        return line

    def rest(self) -> str:
        """The child's output so far (for a failure's message)."""
        import queue

        deadline = time.monotonic() + 1  # what the child says within a second
        with contextlib.suppress(queue.Empty):
            while (left := deadline - time.monotonic()) > 0:
                self.seen.append(self.queue.get(timeout=left))
        while not self.queue.empty():
            self.seen.append(self.queue.get())
        return "the server's output:\n" + "\n".join(self.seen[-60:])


def test_group_messages_reach_a_member_in_another_process():
    """A child process joins a group; this process sends to it, a short message and one over
    NOTIFY's 8,000 bytes (sent in parts), one after the other and then at once (as answers
    being written in several threads do); all arrive whole, the first two in order."""
    child = subprocess.Popen(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", LISTEN],
        cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines = Lines(child)
    try:
        assert lines.next(60) == "PostgresChannelLayer"
        assert lines.next(30) == "READY"
        layer = PostgresChannelLayer()
        long_text = "Wörter und 汉字 " * (PART_BYTES // 5)
        small = {"type": "chat.event", "event": "token", "data": {"text": "hello"}}
        large = {"type": "chat.event", "event": "done", "data": {"text": long_text}}
        async_to_sync(layer.group_send)("chat.7", small)
        async_to_sync(layer.group_send)("chat.7", large)
        async_to_sync(layer.group_send)("chat.8", small)  # another group: not delivered
        assert json.loads(lines.next(20)) == small
        assert json.loads(lines.next(20)) == large

        async def at_once() -> None:
            await asyncio.gather(
                layer.group_send("chat.7", large), layer.group_send("chat.7", small)
            )

        async_to_sync(at_once)()
        got = [lines.next(20), lines.next(20)]
        assert sorted(got) == sorted(json.dumps(m) for m in (small, large))
    finally:
        child.kill()
        child.wait()


# --- `serve` with two web processes ----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_pid(web_pids: list[int], port: int, client_port: int) -> int:
    """Which web process holds the server side of the connection from `client_port`."""

    def holder() -> int | None:
        for pid in web_pids:
            for conn in psutil.Process(pid).net_connections(kind="tcp"):
                ends = (conn.laddr.port if conn.laddr else 0, conn.raddr.port if conn.raddr else 0)
                if ends == (port, client_port):
                    return pid
        return None

    return wait_until(
        holder, 10, message=f"no web process holds the connection from port {client_port}"
    )  # fmt: skip


def _one_per_process(open_one, web_pids: list[int], port: int) -> dict[int, object]:
    """Open connections (open_one() → (connection, its local port)) until each web process
    holds one; the kernel picks the process, so a few tries may be needed."""
    held: dict[int, object] = {}
    for _ in range(40):
        conn, client_port = open_one()
        pid = _server_pid(web_pids, port, client_port)
        if pid in held:
            conn.close()
        else:
            held[pid] = conn
        if len(held) == len(web_pids):
            return held
    raise AssertionError(f"connections reached only {len(held)} of {len(web_pids)} processes")


@pytest.fixture
def served(tmp_path):
    """`manage.py serve --no-worker` with two web processes on the test database."""
    port = _free_port()
    env = _env(
        DATA_DIR=str(tmp_path),
        PORT=str(port),
        WEB_PROCESSES="2",
        CHAT_MODEL="",  # the extractive answerer
        EMBEDDING_WARM_UP="false",
        RERANKER="none",
        LOGIN_FAILURE_LIMIT="3",
        TOKEN_FAILURE_RATE_LIMIT="3/m",
        DEBUG="false",
        SECRET_KEY=settings.SECRET_KEY,  # the sessions this process makes
    )
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-worker"], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=as_from_a_terminal,
    )  # fmt: skip
    lines = Lines(proc)
    try:
        while f"Notebook is running at http://127.0.0.1:{port}/" not in lines.next(120):
            pass
        webs = [
            p.pid
            for p in psutil.Process(proc.pid).children()
            if "notebook.daphne_http" in " ".join(p.cmdline())
        ]
        yield port, webs, lines
    finally:
        proc.send_signal(2)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            for p in psutil.Process(proc.pid).children(recursive=True):
                p.kill()
            proc.kill()
            proc.wait()


def test_an_answer_generated_in_one_web_process_streams_to_a_socket_in_another(
    alice, conversation, served
):
    port, webs, lines = served
    try:
        _stream_across(alice, conversation, port, webs, lines.seen)
    except (AssertionError, OSError) as exc:
        raise AssertionError(lines.rest()) from exc


def _stream_across(alice, conversation, port: int, webs: list[int], output: list[str]) -> None:
    assert len(webs) == 2, output
    assert "Web processes: 2 (WEB_PROCESSES)" in output
    browser = Client()
    browser.force_login(alice)
    browser.get("/")  # the CSRF cookie too
    cookie = "; ".join(f"{k}={v.value}" for k, v in browser.cookies.items())
    base = f"127.0.0.1:{port}"
    headers = {"Cookie": cookie, "Origin": f"http://{base}"}
    url = f"ws://{base}/ws/chat/{conversation.pk}/"

    def open_socket() -> tuple[Socket, int]:
        socket = Socket(url, headers)
        return socket, socket.sock.getsockname()[1]

    sockets = _one_per_process(open_socket, webs, port)
    asker, follower = (sockets[pid] for pid in webs)
    assert isinstance(asker, Socket)
    assert isinstance(follower, Socket)
    asker.send({"action": "ask", "content": QUESTION})
    # The answer is generated by a thread of the asker's process; the follower's socket, in
    # the other process, sees it appear and finish. (The asker's socket, left unread, may
    # be closed by daphne's ping timeout meanwhile: the answer goes on all the same.)
    frames = follower.until(lambda f: '<div id="message-list"' in f, timeout=60)
    answer_id = int(re.findall(r'<article id="message-(\d+)"', frames[-1])[1])
    last = follower.until(final(answer_id), timeout=120)[-1]
    assert "complete" in last
    for sock in sockets.values():
        sock.close()  # type: ignore[attr-defined]


def test_a_burst_of_connections_is_spread_over_the_web_processes(served):
    """40 connections opened at once (20 users asking together) are dealt out among the web
    processes by the kernel, not taken all by whichever process woke first: each process's
    share of the answers then runs under its own interpreter lock."""
    if not balances_connections():
        pytest.skip("the kernel balances sockets sharing a port only on Linux")
    port, webs, lines = served
    conns = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(40)]
    try:
        held = Counter(_server_pid(webs, port, c.getsockname()[1]) for c in conns)
    finally:
        for c in conns:
            c.close()
    # Each holds 20 ± 3.2 by a fair coin; fewer than 8 happens about once in 10,000 runs.
    assert min(held[pid] for pid in webs) >= 8, (held, lines.rest())


def _connection(port: int) -> tuple[http.client.HTTPConnection, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.connect()
    assert conn.sock is not None
    return conn, conn.sock.getsockname()[1]


def _request(
    conn, method: str, path: str, body: str = "", headers=None
) -> tuple[int, str, dict[str, str]]:
    conn.request(method, path, body=body.encode() or None, headers=headers or {})
    response = conn.getresponse()
    return response.status, response.read().decode(errors="replace"), dict(response.getheaders())


def test_lockouts_and_rate_limits_count_across_web_processes(alice, served):
    """Kept-alive connections, one held by each web process, take turns: the counts add up."""
    port, webs, lines = served
    try:
        _limits_across(alice, port, webs)
    except (AssertionError, OSError) as exc:
        raise AssertionError(lines.rest()) from exc


def _limits_across(alice, port: int, webs: list[int]) -> None:
    alice.set_password("right horse battery")
    alice.save()
    held = _one_per_process(lambda: _connection(port), webs, port)
    conns = [held[pid] for pid in webs]

    # Wrong API tokens: 3 per minute from one address, then 429, whichever process answers.
    statuses = [
        _request(conns[i % 2], "GET", "/api/notebooks", headers={"Authorization": "Bearer nb_x"})[0]
        for i in range(4)
    ]
    assert statuses == [401, 401, 401, 429]

    # Logins: 3 failures lock the username from this address, in both processes.
    def login(conn, password: str) -> tuple[int, str]:
        _, page, head = _request(conn, "GET", "/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
        csrf = re.search(r"csrftoken=([^;]+)", head.get("Set-Cookie", "")).group(1)  # type: ignore[union-attr]
        form = urllib.parse.urlencode(
            {"csrfmiddlewaretoken": token, "username": "alice", "password": password}
        )
        status, body, _ = _request(
            conn, "POST", "/accounts/login/", form,
            {"Content-Type": "application/x-www-form-urlencoded", "Cookie": f"csrftoken={csrf}",
             "Origin": f"http://127.0.0.1:{port}"},
        )  # fmt: skip
        return status, body

    statuses = [login(conns[i % 2], "wrong")[0] for i in range(3)]
    assert statuses == [200, 200, 429]  # the form with its error twice; the third locks
    for conn in conns:
        status, body = login(conn, "right horse battery")
        assert status == 429, body[:300]  # the lockout page, not a redirect into the app
    for conn in conns:
        assert isinstance(conn, http.client.HTTPConnection)
        conn.close()
