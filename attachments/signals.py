"""What ingestion tells the layers above it, as Django signals: attachments never imports
guides or intelligence; they connect their receivers in their `AppConfig.ready()` (as
paperless-ngx tells its consumers after consumption). Receivers run in the sender's thread
and transaction, in the order the apps are installed."""

from __future__ import annotations

from django.dispatch import Signal

# A source finished ingesting and is ready (kwargs: attachment_id).
source_ready = Signal()
# A source is about to be extracted again (kwargs: attachment): what was derived from it is stale.
source_reprocessed = Signal()
# A source of this notebook was deleted (kwargs: notebook_id).
source_deleted = Signal()
# `manage.py reembed` resized the vector columns to `dimensions` (kwargs: cursor, dimensions),
# in its transaction: the layers above resize theirs with that cursor, in the same transaction.
vectors_resized = Signal()
# `manage.py reembed` brings every vector to `model` (kwargs: model, everything: also those from
# it already); each receiver re-embeds what it keeps, there and then, and returns what it did
# ("3 source profile(s)"), or "" for nothing.
reembedding = Signal()
