"""Embedding progress reaches the row between slices of a batch, not only once per batch."""

from __future__ import annotations

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
