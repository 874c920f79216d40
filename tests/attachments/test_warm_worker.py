"""A new django-q2 worker process loads what the first pass needs before the first upload."""

from __future__ import annotations

from django_q.signals import post_spawn

from attachments.apps import warm_worker
from core.language import _identifier


def test_a_new_worker_loads_the_language_identifier_in_the_background():
    sync_receivers, _ = post_spawn._live_receivers("django_q")
    assert warm_worker in sync_receivers  # connected for every worker process django-q2 spawns
    _identifier.cache_clear()
    thread = warm_worker(sender="django_q", proc_name="Worker-1")
    thread.join(60)
    assert not thread.is_alive()
    assert _identifier.cache_info().currsize == 1  # the next detect_language does not load it
