from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from django.test import Client

from accounts.services import api_token_create
from tests.factories import NotebookFactory, NoteFactory, UserFactory
from tests.fixtures.documents import EVAL_PDFS, upload

# Fixtures shared between test modules live in tests/fixtures/ (helpers there are imported as
# plain functions); a test module never imports another test module.
pytest_plugins = [
    "tests.fixtures.answers",
    "tests.fixtures.clock",
    "tests.fixtures.live",
    "tests.fixtures.search",
    "tests.fixtures.sockets",
]


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    # The manifest storage needs `collectstatic`; tests serve static files from the finders.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Tests in this process are one server: Channels' in-memory layer, as before. The
    # PostgreSQL layer that `serve`'s web processes share is tested across real processes
    # (tests/test_web_processes.py).
    if (
        settings.CHANNEL_LAYERS["default"]["BACKEND"]
        == "notebook.channel_layer.PostgresChannelLayer"
    ):
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels.layers.InMemoryChannelLayer",
                "CONFIG": {"capacity": 1000},
            }
        }
    # Tests import notebook.asgi; a model loading in the background would make whichever
    # search runs meanwhile keyword-only. Tests of the warm-up turn it back on.
    settings.EMBEDDING_WARM_UP = False
    # Servers and workers that tests start on a temporary DATA_DIR share this run's ONNX export
    # of the embedding model instead of making their own (a minute each).
    os.environ.setdefault("EMBEDDING_CACHE_DIR", str(settings.EMBEDDING_CACHE_DIR))
    # WhiteNoise warns on every request when STATIC_ROOT is missing (`serve` collects into it).
    settings.STATIC_ROOT.mkdir(parents=True, exist_ok=True)
    # Prometheus samples of this run (and of the workers it starts) in a directory of its own,
    # never DATA_DIR's (`make run`'s); set before anything is recorded (core/metrics.py).
    # (Named like DATA_DIR's: tests/test_metrics.py starts a process that finds it from there.)
    metrics_dir = Path(tempfile.mkdtemp(prefix="notebook-tests-")) / "metrics"
    metrics_dir.mkdir()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    atexit.register(shutil.rmtree, metrics_dir.parent, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Browser tests last: Playwright's sync API keeps an event loop running in the main thread
    # from the first browser test to the end of the session, which breaks async_to_sync in
    # any test after it.
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)
    # The several-machines test takes minutes (reaper and abandoned-answer clocks): only when
    # asked for by name (`make test-topology`, i.e. `pytest -m topology`).
    if "topology" not in (config.getoption("markexpr") or ""):
        topology = [item for item in items if item.get_closest_marker("topology")]
        if topology:
            config.hook.pytest_deselected(items=topology)
            items[:] = [item for item in items if not item.get_closest_marker("topology")]


@pytest.hookimpl(trylast=True)  # after -m has deselected what it leaves out
def pytest_collection_finish(session: pytest.Session) -> None:
    # Only tests marked `eval` read the evaluation PDFs; the rest use tests/samples/.
    evaluated = any(item.get_closest_marker("eval") for item in session.items)
    if evaluated and not (EVAL_PDFS / "R-data.pdf").exists():
        raise pytest.UsageError(
            f"The evaluation PDFs are missing: expected {EVAL_PDFS}. Check out shared/ beside "
            "this repository, set NOTEBOOK_EVAL_PDFS to the directory holding them, or leave "
            "out the tests that need them with -m 'not eval'."
        )


@pytest.fixture
def alice(db):
    return UserFactory.create(username="alice")


@pytest.fixture
def bob(db):
    return UserFactory.create(username="bob")


@pytest.fixture
def alice_client(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def anon_client() -> Client:
    return Client()


@pytest.fixture
def alice_token(alice) -> str:
    _, raw = api_token_create(user=alice, name="tests")
    return raw


@pytest.fixture
def alice_api(alice_token) -> Client:
    """A script's view of the API: bearer token, no cookies, no CSRF token."""
    return Client(headers={"Authorization": f"Bearer {alice_token}"})


@pytest.fixture
def bob_notebook(bob):
    return NotebookFactory.create(owner=bob, title="Bob's secrets")


@pytest.fixture
def bob_note(bob, bob_notebook):
    return NoteFactory.create(
        notebook=bob_notebook, author=bob, title="Bob's note", body="bob only"
    )


@pytest.fixture(scope="module", autouse=True)
def _vacuumed_vectors(request):
    """After each module, VACUUM the vector tables. A test's rows are rolled back, but their
    entries stay in the HNSW indexes until a vacuum; after a module that embedded thousands
    of passages (the fake embedder's random vectors), the graph is mostly dead nodes and an
    approximate search over a later test's few passages could miss its true nearest ones
    (a follow-up then read as a new topic, now and then). Production tables are vacuumed by
    autovacuum; a test run makes that churn in minutes."""
    mine = [item for item in request.session.items if item.module is request.module]
    if not any(item.get_closest_marker("django_db") for item in mine):
        yield  # the module does not touch the database
        return
    request.getfixturevalue("django_db_setup")
    blocker = request.getfixturevalue("django_db_blocker")
    yield
    from django.db import connection

    with blocker.unblock():
        if connection.in_atomic_block:
            return
        with connection.cursor() as cursor:
            for table in ("attachments_chunkvector", "notes_notevector"):
                cursor.execute(f"VACUUM {table}")


@pytest.fixture(autouse=True)
def _closed_breakers():
    """Circuit breakers live as long as the process: each test starts with them closed."""
    from core.breakers import reset_all

    reset_all()
    yield
    reset_all()


@pytest.fixture(autouse=True)
def _default_language():
    """Each test starts in the default language: a language a test (or a request served in
    its thread) activated would otherwise stay active in this thread for the tests after it."""
    from django.utils import translation

    translation.deactivate()
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _media_root(settings, tmp_path_factory):
    """Uploaded files go to a fresh directory per test, never to DATA_DIR."""
    settings.MEDIA_ROOT = tmp_path_factory.mktemp("media")


@pytest.fixture
def bob_attachment(bob, bob_note):
    return upload(bob, bob_note, "locked.pdf")
