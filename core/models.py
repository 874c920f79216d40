"""Background jobs, queued fairly per user (core.jobs)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Job(models.Model):
    """One piece of background work a user caused: which task function, with which ids.

    django-q2's queue is first in, first out; these rows are the real queue. Each job sends one
    *ticket* to django-q2, and a ticket runs whichever job is fairest when a worker takes it
    (core.jobs.job_run_next), so one user's backlog never stands between another user and the
    next free worker. Finished rows are kept for an hour: they say whose jobs ran last."""

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    # Whose work it is (the uploader, the note's author, the notebook's owner); null for work
    # nobody asked for (an operator's command), which takes its turn like one more user.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE
    )
    func = models.CharField(max_length=200)  # dotted path of a task function taking ids
    args = models.JSONField(default=list, blank=True)
    group = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    max_attempts = models.PositiveSmallIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    not_before = models.DateTimeField(null=True, blank=True)  # not run before (a delay, a backoff)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["state", "created_at"], name="core_job_state_created"),
            models.Index(fields=["user", "state"], name="core_job_user_state"),
        ]

    def __str__(self) -> str:
        return f"{self.func}{tuple(self.args)} [{self.state}]"
