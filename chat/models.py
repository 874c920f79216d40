from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from pgvector.django import VectorField

from notes.models import Note, Notebook


class Mode(models.TextChoices):
    """How answers are written (see docs/chat.md): exploring spreads over the sources, research
    keeps only strong passages and cites every claim, learning explains step by step."""

    # The labels are the ones Django would derive (so no migration), marked for translation.
    EXPLORING = "exploring", _("Exploring")
    RESEARCH = "research", _("Research")
    LEARNING = "learning", _("Learning")


class Conversation(models.Model):
    """A saved chat about one notebook (all its notes and PDFs), with `note` set about one
    note's PDFs, or with `attachment` set about that one PDF ("Ask this PDF"; its note is set
    too, so the chat falls back to the note's PDFs if the file is deleted). Access goes
    through chat.selectors."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    notebook = models.ForeignKey(Notebook, on_delete=models.CASCADE, related_name="conversations")
    note = models.ForeignKey(
        Note, on_delete=models.CASCADE, null=True, blank=True, related_name="conversations"
    )
    attachment = models.ForeignKey(
        "attachments.NoteAttachment",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="conversations",
    )
    title = models.CharField(max_length=200)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.EXPLORING)
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
    # A question: the mode it was asked in, what retrieval searched for it (the question
    # itself, or the chat model's rewrite when it follows up an earlier one), and whether it
    # was searched with the conversation as context (see chat.reformulation).
    mode = models.CharField(max_length=16, choices=Mode.choices, blank=True)
    search_query = models.TextField(blank=True)
    is_follow_up = models.BooleanField(default=False)
    anchors = models.JSONField(default=list, blank=True)  # attachment ids boosted (anchoring)
    # A question: the sources the user chose for it (chips and ticked boxes, chat.selection):
    # [{"kind": "file"|"path", "mode": "markdown"|"all", "ref", "name", "path",
    #   "source_ids": ["attachment:5", "note:3"], "subfile_count"}], and the sources they
    # deselected (["attachment:5"]), which neither scope nor carry-over may use.
    explicit_selections = models.JSONField(default=list, blank=True)
    excluded_sources = models.JSONField(default=list, blank=True)
    # Summarised into a ConversationSummary: shown in full, no longer sent to the model.
    compacted = models.BooleanField(default=False)
    # The message's text embedded (computed when first needed), to find earlier relevant turns.
    embedding = VectorField(dimensions=settings.EMBEDDING_DIMENSIONS, null=True, blank=True)
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

    @property
    def rewritten(self) -> bool:
        """A question the chat model rewrote into another search (a follow-up made
        self-contained); offline, a question is always searched as asked."""
        return bool(self.search_query) and self.search_query != self.content


class ConversationSummary(models.Model):
    """A summary of a batch of older messages of a conversation (compaction): sent to the model
    instead of them; the page shows it collapsible above the messages, which stay in full."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="summaries"
    )
    text = models.TextField()
    first_message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    last_message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    message_count = models.PositiveIntegerField()
    summarizer = models.CharField(max_length=16)  # "llm" | "extractive"
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["first_message_id"]

    def __str__(self) -> str:
        return f"summary of {self.message_count} messages"


class Memory(models.Model):
    """Something worth remembering across the conversations of one notebook, for one user:
    a fact, a preference or an insight, with an importance 0..1. Access goes through
    chat.selectors (always with the owner)."""

    class Kind(models.TextChoices):
        FACT = "fact", _("Fact")
        PREFERENCE = "preference", _("Preference")
        INSIGHT = "insight", _("Insight")

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memories"
    )
    notebook = models.ForeignKey(Notebook, on_delete=models.CASCADE, related_name="memories")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    text = models.TextField()
    importance = models.FloatField(default=0.5)
    embedding = VectorField(dimensions=settings.EMBEDDING_DIMENSIONS, null=True, blank=True)
    # The answer whose exchange it was drawn from (kept when the conversation is deleted).
    source_message = models.ForeignKey(
        Message, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-importance", "-created_at"]
        indexes = [models.Index(fields=["owner", "notebook", "-importance"])]

    def __str__(self) -> str:
        return f"{self.kind}: {self.text[:40]}"
