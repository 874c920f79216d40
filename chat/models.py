from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from notes.models import Note, Notebook


class Conversation(models.Model):
    """A saved chat about one notebook (all its notes and PDFs) or, with `note` set, about one
    note's PDFs. Access goes through chat.selectors."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    notebook = models.ForeignKey(Notebook, on_delete=models.CASCADE, related_name="conversations")
    note = models.ForeignKey(
        Note, on_delete=models.CASCADE, null=True, blank=True, related_name="conversations"
    )
    title = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "notebook", "-updated_at"])]

    def __str__(self) -> str:
        return self.title


class Message(models.Model):
    """One turn. An assistant message is written while it streams (`status` says how far it
    got) and keeps everything needed to show it again exactly as it was shown."""

    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"

    class Status(models.TextChoices):
        PENDING = "pending"  # queued, nothing generated yet
        STREAMING = "streaming"
        COMPLETE = "complete"
        ERROR = "error"  # generation failed; `error` says why; the question can be retried
        INTERRUPTED = "interrupted"  # the process died mid-answer; retry re-runs it

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)  # user: the question; assistant: Markdown with [n]
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.COMPLETE)
    error = models.TextField(blank=True)
    # The question this answer answers (for retries).
    reply_to = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="answers"
    )
    answerer = models.CharField(max_length=16, blank=True)  # "llm" | "extractive"
    # [{"n", "attachment_id", "file", "page", "chunk_id", "quote"}] — verified quotes only.
    citations = models.JSONField(default=list, blank=True)
    # [{"kind", "id", "score", ...}] every passage the tools returned.
    retrieved = models.JSONField(default=list, blank=True)
    tool_calls = models.JSONField(default=list, blank=True)  # [{"name", "arguments", "summary"}]
    confidence = models.CharField(max_length=8, blank=True)  # high | medium | low
    follow_ups = models.JSONField(default=list, blank=True)
    usage = models.JSONField(default=dict, blank=True)  # prompt/completion tokens
    timings = models.JSONField(default=dict, blank=True)  # retrieval, first_token, total (s)
    # e.g. {"unverified_citations": 1, "abstained": true}
    metadata = models.JSONField(default=dict, blank=True)
    # Which generation owns a streaming answer: each claim adds one, and a generation writes
    # only while the row still carries its number (see chat.agent).
    attempt = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    # While an answer is written, its process touches this every few seconds (the heartbeat
    # in chat.agent); an answer in progress that stopped being touched lost its process.
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at", "pk"]
        indexes = [
            models.Index(fields=["conversation", "created_at"]),
            models.Index(
                fields=["updated_at"],
                condition=Q(status__in=["pending", "streaming"]),
                name="chat_message_in_progress",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"
