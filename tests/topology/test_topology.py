"""Several machines, proven on one: PostgreSQL over TCP, Debian's redis-server, two web
processes behind Debian's nginx (TLS, WebSockets), two workers, each started as README's
"Running on several machines" and deploy/ say. A question asked through one web process
streams to a browser connected to the other; uploads are ingested by either worker; killing
one web process and one worker mid-flight loses nothing.

Too slow for `make test` (about two minutes: a dead worker's file is requeued by the reaper
30 s after its last progress, an answer whose web process died is marked interrupted after
60 s): deselected there, run by `make test-topology` (`pytest -m topology`).

The chat model and the embedding server are local fakes (tests/fake_chat.py,
tests/fake_openai.py), the only stand-ins: they let the test hold an answer half-written and an
ingestion half-embedded while it kills the processes doing them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
from playwright.sync_api import Browser, Page, WebSocket, expect

from tests.fake_chat import Answer, FakeChat, fake_chat_server
from tests.fake_openai import FakeOpenAI, fake_openai_server
from tests.fixtures.documents import EVAL_PDFS
from tests.topology.stack import (
    DEPLOY,
    NGINX,
    REDIS_SERVER,
    ROOT,
    NginxPorts,
    Process,
    Stack,
    free_port,
    render_nginx,
    self_signed_certificate,
    start_nginx,
    start_postgres,
    start_redis,
    unit_command,
    upstreams,
    wait_for_port,
)

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.topology]

PASSWORD = "Sturdy-Tulip-4821"
FIRST_QUESTION = "Why does the url package refuse to break a line between two colons?"
SECOND_QUESTION = "Which characters does the url package break lines at?"
INGEST_STALE_SECONDS = 30  # the least allowed: a killed worker's file is requeued this soon
# django-q2 logs "<process> processing <task> '<function>'" when a worker starts a task.
INGEST_TASK = "'attachments.tasks.ingest_attachment'"

SETUP = """
import json
from django.contrib.auth.models import User
from accounts.services import api_token_create
from chat.services import conversation_create
from notes.services import note_create, notebook_create
user = User.objects.create_user(username="olga", password=%r)
notebook = notebook_create(owner=user, title="TeX")
note = note_create(notebook=notebook, author=user, title="URLs in LaTeX")
conversation = conversation_create(owner=user, notebook=notebook)
_, token = api_token_create(user=user, name="topology test")
print(json.dumps({"note": note.pk, "conversation": conversation.pk, "token": token}))
"""


@dataclass
class Topology:
    stack: Stack
    env: dict[str, str]
    webs: dict[str, Process]
    web_ports: dict[str, int]
    workers: dict[str, Process]
    nginx: Process
    ports: NginxPorts
    cert: Path
    pg_port: int
    note: int
    conversation: int
    token: str
    embeddings: FakeOpenAI
    chat: FakeChat
    started_in: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)

    def url(self, entry: str = "main") -> str:
        """https:// of nginx: "main" is the shipped server (both web processes), "a"/"b"
        prefer that web process."""
        port = self.ports.main if entry == "main" else self.ports.prefer[entry]
        return f"https://127.0.0.1:{port}"

    def access(self, entry: str) -> Path:
        """nginx's access log of an entry point (see `url`)."""
        return self.stack.tmp / f"access-{entry}.log"

    def api(self, method: str, path: str, entry: str = "main", **kwargs: Any) -> Any:
        response = requests.request(
            method, f"{self.url(entry)}/api{path}", verify=str(self.cert), timeout=60,
            headers={"Authorization": f"Bearer {self.token}"}, **kwargs,
        )  # fmt: skip
        assert response.status_code < 300, (response.status_code, response.text[:500])
        return response.json()

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(
            host="127.0.0.1", port=self.pg_port, user="postgres", dbname="notebook",
            autocommit=True,
        ) as conn:  # fmt: skip
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def upload(self, name: str) -> int:
        files = [("files", (name, (EVAL_PDFS / name).read_bytes(), "application/pdf"))]
        body = self.api("POST", f"/notes/{self.note}/attachments", files=files)
        return int(body["attachments"][0]["id"])

    def attachment(self, pk: int) -> dict[str, Any]:
        return dict(self.api("GET", f"/attachments/{pk}"))

    def wait_ready(self, pk: int, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.attachment(pk)
            if found["status"] == "ready":
                return found
            assert found["status"] in ("pending", "processing"), found
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {w.name}\n{w.tail()}" for w in self.workers.values())
                raise AssertionError(f"attachment {pk} not ready in {timeout} s: {found}\n{logs}")
            time.sleep(0.5)

    def ingest_runs(self) -> dict[str, int]:
        """How many ingestion tasks each worker has started (its own log)."""
        return {
            name: sum(" processing " in line and INGEST_TASK in line for line in lines)
            for name, w in self.workers.items()
            for lines in [w.text().splitlines()]
        }


def _environment(
    tmp: Path, pg_port: int, redis_port: int, ports: NginxPorts, embeddings: FakeOpenAI,
    chat: FakeChat,
) -> dict[str, str]:  # fmt: skip
    """deploy/systemd/notebook.env.example with this run's addresses (and the fakes)."""
    example = {}
    for line in (DEPLOY / "systemd" / "notebook.env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            example[key] = value
    ours = {
        "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{pg_port}/notebook",
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "DATA_DIR": str(tmp / "data"),
        "MEDIA_ROOT": str(tmp / "shared-media"),
        "SECRET_KEY": "topology-test-" + "x" * 50,
        "ALLOWED_HOSTS": "127.0.0.1",
        "CSRF_TRUSTED_ORIGINS": f"https://127.0.0.1:{ports.main}",
        "SECURE_HSTS_SECONDS": "0",  # a browser would remember it for 127.0.0.1
        "WORKERS": "1",
    }
    assert set(ours) <= set(example), set(ours) - set(example)
    fakes = {
        "EMBEDDING_BACKEND": "openai",
        "EMBEDDING_BASE_URL": embeddings.url,
        "EMBEDDING_API_KEY": "sk-test",
        "EMBEDDING_MODEL": "fake-embed",
        "OPENAI_BASE_URL": f"{chat.url}/v1",
        "OPENAI_API_KEY": "sk-test",
        "CHAT_MODEL": "fake",
        "INGEST_STALE_SECONDS": str(INGEST_STALE_SECONDS),
    }
    system = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    return {**system, **example, **ours, **fakes, "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[Topology]:
    for program in (NGINX, REDIS_SERVER):
        if not Path(program).exists():
            pytest.fail(f"{program} is missing: `make test-topology` installs nginx and "
                        "redis-server (apt-get) when run as root.", pytrace=False)  # fmt: skip
    stack = Stack(tmp_path)
    with fake_openai_server(dims=384) as embeddings, fake_chat_server() as chat:
        try:
            yield _start(stack, embeddings, chat)
        finally:
            stack.stop()


def _start(stack: Stack, embeddings: FakeOpenAI, chat: FakeChat) -> Topology:
    started = time.monotonic()
    tmp = stack.tmp
    redis_port = start_redis(stack)
    pg_port = start_postgres(stack)
    ports = NginxPorts(
        http=free_port(), main=free_port(), prefer={"a": free_port(), "b": free_port()}
    )
    env = _environment(tmp, pg_port, redis_port, ports, embeddings, chat)
    manage = [sys.executable, "manage.py"]
    # Once per release, from any one machine (README): migrations and static files.
    migrate = stack.start("migrate", [*manage, "migrate", "--no-input"], env=env)
    collect = stack.start("collectstatic", [*manage, "collectstatic", "--no-input"], env=env)
    web_ports = {"a": free_port(), "b": free_port()}
    cert, key = self_signed_certificate(tmp)
    nginx = start_nginx(stack, render_nginx(tmp, web_ports, ports, cert, key), ports)
    for step in (migrate, collect):
        assert step.popen.wait(timeout=300) == 0, step.tail()
    webs = {
        name: stack.start(f"web-{name}", unit_command("notebook-web@.service", str(port)), env=env)
        for name, port in web_ports.items()
    }
    workers = {
        n: stack.start(f"worker-{n}", unit_command("notebook-worker@.service", n), env=env)
        for n in ("1", "2")
    }
    made = subprocess.run(
        [*manage, "shell", "--no-imports", "-c", SETUP % PASSWORD], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    data = json.loads(made.stdout.strip().splitlines()[-1])
    for name, port in web_ports.items():
        wait_for_port(port, webs[name], 120)
    for worker in workers.values():
        deadline = time.monotonic() + 120
        while "running." not in worker.text():  # django-q2: "Q Cluster … running."
            worker.check_alive()
            assert time.monotonic() < deadline, worker.tail()
            time.sleep(0.2)
    return Topology(
        stack=stack, env=env, webs=webs, web_ports=web_ports, workers=workers, nginx=nginx,
        ports=ports, cert=cert, pg_port=pg_port, note=data["note"],
        conversation=data["conversation"], token=data["token"], embeddings=embeddings,
        chat=chat, started_in=time.monotonic() - started,
    )  # fmt: skip


def hold_answers(chat: FakeChat) -> None:
    """The chat model stops after a few pieces of each answer until `chat.gate` is set."""
    chat.gate.clear()

    def respond(body: dict[str, Any]) -> Any:
        turn = chat.default_turn(body)
        if isinstance(turn, Answer) and body.get("stream"):
            return replace(turn, chunk_size=4, pause_after=3)
        return turn

    chat.respond = respond


def watch_socket(page: Page) -> list[str]:
    """Every WebSocket frame the page receives."""
    frames: list[str] = []

    def on_socket(socket: WebSocket) -> None:
        socket.on("framereceived", lambda payload: frames.append(str(payload)))

    page.on("websocket", on_socket)
    return frames


def login(page: Page, base: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username", exact=True).fill("olga")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page).to_have_url(re.compile(r"/$"))


def test_two_webs_two_workers_behind_nginx_lose_nothing(
    topology: Topology, browser: Browser
) -> None:
    top = topology
    begun = time.monotonic()
    print(f"\nstarted postgres, redis, nginx, 2 webs, 2 workers in {top.started_in:.1f} s")

    # --- An upload through nginx is ingested by a worker (either). -------------------------
    first = top.upload("url.pdf")
    top.wait_ready(first, 120)
    ran_first = top.ingest_runs()
    assert sum(ran_first.values()) >= 1, ran_first
    print(f"url.pdf ingested; ingestion tasks run per worker: {ran_first}")

    # --- A browser on web B sees the answer to a question asked through web A stream in. ----
    context = browser.new_context(
        ignore_https_errors=True, viewport={"width": 1280, "height": 900}, locale="en-US"
    )
    context.set_default_timeout(20_000)
    try:
        page = context.new_page()
        frames = watch_socket(page)
        login(page, top.url("b"))
        page.goto(f"{top.url('b')}/chats/{top.conversation}/")
        expect(page.locator("#chat")).to_have_attribute("data-socket", "open", timeout=20_000)
        hold_answers(top.chat)
        asked: dict[str, Any] = {}

        def ask_through_a() -> None:  # Server-Sent Events, read to the end in a thread
            response = requests.post(
                f"{top.url('a')}/api/conversations/{top.conversation}/messages",
                json={"content": FIRST_QUESTION, "stream": True}, verify=str(top.cert),
                headers={"Authorization": f"Bearer {top.token}"}, stream=True, timeout=120,
            )  # fmt: skip
            asked["status"] = response.status_code
            lines = [str(line) for line in response.iter_lines(decode_unicode=True)]
            asked["events"] = [
                line.removeprefix("event: ") for line in lines if line.startswith("event: ")
            ]

        asking = threading.Thread(target=ask_through_a, daemon=True)
        asking.start()
        expect(page.locator(".message-user")).to_have_text(FIRST_QUESTION, timeout=30_000)
        answer = page.locator("article.message-assistant").last
        answer_id = int((answer.get_attribute("id") or "").removeprefix("message-"))
        # Half-written (the model is held): what the page shows came over B's socket.
        expect(answer.locator(".streaming-text")).to_have_text(re.compile(r"\S"), timeout=60_000)
        ((status,),) = top.sql("SELECT status FROM chat_message WHERE id = %s", answer_id)
        assert status in ("pending", "streaming"), status  # still being written
        streamed = [f for f in frames if f'id="message-{answer_id}-text"' in f]
        assert streamed, frames
        top.chat.gate.set()
        expect(answer).to_have_attribute("data-status", "complete", timeout=60_000)
        expect(answer.get_by_test_id("answer")).to_contain_text("The documents say")
        asking.join(60)
        assert asked.get("status") == 200, asked
        assert asked["events"][-1] == "done", asked
        posted = [u for r, u in upstreams(top.access("a")) if "POST /api" in r]
        assert posted == [f"127.0.0.1:{top.web_ports['a']}"], posted
        page.close()  # nginx logs the socket once it has closed: it was web B's
        deadline = time.monotonic() + 15
        while not (sockets := [u for r, u in upstreams(top.access("b")) if "/ws/chat/" in r]):
            assert time.monotonic() < deadline, "nginx logged no socket"
            time.sleep(0.2)
        assert sockets == [f"127.0.0.1:{top.web_ports['b']}"], sockets
        top.timings["cross-process stream"] = time.monotonic() - begun

        # --- Kill a worker mid-ingestion and the web process writing an answer. ------------
        # R-data.pdf's passages wait at the embedding server: its ingestion is mid-flight.
        top.embeddings.hold = lambda payload: "Import/Export" in json.dumps(payload["input"])
        runs_before = top.ingest_runs()
        second = top.upload("R-data.pdf")
        deadline = time.monotonic() + 120
        while not top.embeddings.held:
            assert time.monotonic() < deadline, top.attachment(second)
            time.sleep(0.2)
        assert top.attachment(second)["stage"] == "embedding"
        started = {n: c - runs_before[n] for n, c in top.ingest_runs().items()}
        busy = [n for n, c in started.items() if c]
        assert len(busy) == 1, started
        busy_worker, other_worker = busy[0], next(n for n in top.workers if n != busy[0])
        top.workers[busy_worker].kill()
        killed_at = time.monotonic()
        top.embeddings.hold = None
        top.embeddings.release.set()
        # The reaper (core's, which reaps ingestion too) is scheduled every minute; its next
        # run is brought to just after the file goes stale (the clock of a worker that
        # crashed at any moment).
        top.sql(
            "UPDATE django_q_schedule SET next_run = now() + %s * interval '1 second' "
            "WHERE func = 'core.jobs.job_reap'",
            INGEST_STALE_SECONDS + 1,
        )
        print(f"worker {busy_worker} killed while embedding R-data.pdf")

        # A page held on web A (B as its backup): the question goes over A's socket, A writes.
        hold_answers(top.chat)
        page_a = context.new_page()
        frames_a = watch_socket(page_a)
        page_a.goto(f"{top.url('a')}/chats/{top.conversation}/")
        expect(page_a.locator("#chat")).to_have_attribute("data-socket", "open", timeout=20_000)
        question = page_a.get_by_label("Your question", exact=True)
        question.fill(SECOND_QUESTION)
        question.press("Enter")
        pending = page_a.locator("article.message-assistant").last
        expect(pending.locator(".streaming-text")).to_have_text(re.compile(r"\S"), timeout=60_000)
        pending_id = int((pending.get_attribute("id") or "").removeprefix("message-"))
        ((status,),) = top.sql("SELECT status FROM chat_message WHERE id = %s", pending_id)
        assert status in ("pending", "streaming"), status  # web A is writing it
        top.webs["a"].kill()
        top.chat.gate.set()
        print("web a killed while writing an answer")

        # nginx sends everything to B now: the page's socket reconnects (through the same
        # server block), the answer is marked interrupted once abandoned, Retry answers it.
        expect(page_a.locator("#chat")).to_have_attribute("data-socket", "open", timeout=60_000)
        expect(pending).to_have_attribute("data-status", "interrupted", timeout=120_000)
        pending.get_by_role("button", name="Retry", exact=True).click()
        expect(pending).to_have_attribute("data-status", "complete", timeout=60_000)
        expect(pending.get_by_test_id("answer")).to_contain_text("The documents say")
        assert any(f'id="message-{pending_id}-text"' in f for f in frames_a)

        # The file the dead worker held is requeued and ingested by the other worker.
        ready = top.wait_ready(second, 180)
        recovered_in = time.monotonic() - killed_at
        after = top.ingest_runs()
        assert after[other_worker] > runs_before[other_worker], (runs_before, after)
        ((attempts,),) = top.sql(
            "SELECT attempts FROM attachments_noteattachment WHERE id = %s", second
        )
        assert attempts == 2, attempts  # the killed run, then the other worker's
        print(f"R-data.pdf ready {recovered_in:.0f} s after the kill, rerun by "
              f"worker {other_worker}; runs per worker {after}")  # fmt: skip
        assert ready["page_count"]

        # Nothing lost: both questions answered, both files ready, and nginx's shipped server
        # block serves everything from B.
        for _ in range(4):
            top.api("GET", f"/conversations/{top.conversation}/messages")
        messages = top.api("GET", f"/conversations/{top.conversation}/messages")["items"]
        assert [m["content"] for m in messages if m["role"] == "user"] == [
            FIRST_QUESTION,
            SECOND_QUESTION,
        ]
        answers = [m for m in messages if m["role"] == "assistant"]
        assert [m["status"] for m in answers] == ["complete", "complete"], answers
        assert top.attachment(first)["status"] == "ready"
        recent = [u for r, u in upstreams(top.access("main")) if "GET /api" in r]
        assert recent[-5:] == [f"127.0.0.1:{top.web_ports['b']}"] * 5, recent
        assert top.webs["b"].alive()
        assert top.workers[other_worker].alive()
        assert top.nginx.alive()
    finally:
        context.close()
    print(f"scenario {time.monotonic() - begun:.0f} s after start-up")
