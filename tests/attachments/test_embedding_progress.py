"""Embedding progress reaches the row between slices of a batch, not only once per batch."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from attachments.models import NoteAttachment
from attachments.services import ingestion
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import ingest, upload

pytestmark = pytest.mark.django_db


def test_embedding_progress_moves_within_a_batch(alice, monkeypatch):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice))
    seen: list[tuple[int, int]] = []
    real_update = ingestion._Run.update

    def recording_update(self, **fields):
        if fields.get("stage") == NoteAttachment.Stage.EMBEDDING:
            seen.append((fields["progress_current"], fields["progress_total"]))
        real_update(self, **fields)

    monkeypatch.setattr(ingestion._Run, "update", recording_update)
    monkeypatch.setattr(ingestion, "PROGRESS_INTERVAL", 0)  # every slice writes
    monkeypatch.setattr(ingestion, "EMBED_SLICE", 1)
    attachment = ingest(upload(alice, note, "text.pdf"))
    assert attachment.status == "ready", attachment.error
    total = attachment.chunks.count()
    assert total > 2
    assert seen[0] == (0, total)
    assert seen[-1] == (total, total)
    # The whole document is one batch (128 passages): the steps in between are the slices'.
    between = sorted({current for current, _ in seen if 0 < current < total})
    assert len(between) >= 2, seen
    assert [c for c, _ in seen] == sorted(c for c, _ in seen)  # it only moves forward


@pytest.mark.parametrize(
    ("seconds_per_window", "sizes"),
    [(0.001, [16, 32, 52]), (0.25, [16] + [8] * 10 + [4])],  # an idle machine; a busy one
)
def test_slices_shrink_to_about_a_second_when_embedding_is_slow(
    monkeypatch, seconds_per_window, sizes
):
    clock = [0.0]
    calls: list[int] = []
    moved: list[int] = []

    class Embedder:
        def embed(self, texts):
            calls.append(len(texts))
            clock[0] += seconds_per_window * len(texts)
            return [[float(len(t))] for t in texts]

    class Run:
        embed_slice = ingestion.EMBED_SLICE_FIRST

        def progress(self, stage, current, total):
            moved.append(current)

    monkeypatch.setattr(ingestion, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    texts = [f"window {i}" for i in range(100)]
    run: Any = Run()
    embedder: Any = Embedder()
    vectors = ingestion._embed_in_slices(run, embedder, texts, 0, 50, 50)
    assert calls == sizes
    assert vectors == [[float(len(t))] for t in texts]  # every window, in its own place
    assert moved == sorted(moved)
    assert moved[-1] == 50
    # The pace is carried to the next batch: a busy machine's next call starts small.
    calls.clear()
    ingestion._embed_in_slices(run, embedder, texts[:20], 50, 10, 60)
    assert calls[0] == (20 if seconds_per_window < 0.01 else 8)
