from __future__ import annotations

import uuid
from pathlib import PurePosixPath

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.utils.translation import gettext_lazy, pgettext_lazy
from pgvector.django import HnswIndex, VectorField

from notes.models import Note

# Wrong passwords a locked PDF takes; then it stays locked until the user asks to try again.
MAX_PASSWORD_ATTEMPTS = 3


def attachment_path(instance: NoteAttachment, filename: str) -> str:
    # The user's filename is metadata only; on disk a file is <note id>/<uuid>.pdf (an image:
    # <uuid>.<its detected format's extension>, which the caller passes as `filename`).
    suffix = PurePosixPath(filename).suffix.lower() or ".pdf"
    return str(PurePosixPath("attachments") / str(instance.note_id) / f"{instance.uuid}{suffix}")


class NoteAttachment(models.Model):
    """A source attached to a note (a PDF, an image, an Office document or e-book, a web
    page, a transcript or an audio file), and the state of its ingestion."""

    class Kind(models.TextChoices):
        PDF = "pdf", "PDF"
        IMAGE = "image", pgettext_lazy("attachment kind", "Image")
        # Read into units (attachments.formats): sections, slides, sheet rows, time windows.
        DOCUMENT = "document", pgettext_lazy("attachment kind", "Document")
        WEB = "web", pgettext_lazy("attachment kind", "Web page")
        TRANSCRIPT = "transcript", pgettext_lazy("attachment kind", "Transcript")
        AUDIO = "audio", pgettext_lazy("attachment kind", "Audio")

    class Status(models.TextChoices):
        PENDING = "pending", pgettext_lazy("attachment status", "Queued")
        PROCESSING = "processing", pgettext_lazy("attachment status", "Processing")
        NEEDS_PASSWORD = "needs_password", pgettext_lazy("attachment status", "Needs password")
        READY = "ready", pgettext_lazy("attachment status", "Ready")
        FAILED = "failed", pgettext_lazy("attachment status", "Failed")

    class Stage(models.TextChoices):
        QUEUED = "queued", pgettext_lazy("attachment stage", "Queued")
        EXTRACTING = "extracting", gettext_lazy("Extracting text")
        OCR = "ocr", pgettext_lazy("attachment stage", "OCR")
        CHUNKING = "chunking", pgettext_lazy("attachment stage", "Chunking")
        EMBEDDING = "embedding", pgettext_lazy("attachment stage", "Embedding")
        DONE = "done", pgettext_lazy("attachment stage", "Done")

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    note = models.ForeignKey(Note, on_delete=models.CASCADE, related_name="attachments")
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    file = models.FileField(upload_to=attachment_path, max_length=255)
    original_name = models.CharField(max_length=255)
    # An image is OCR'd into one page and otherwise treated like a one-page PDF.
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.PDF)
    # What the content is within its kind ("docx", "epub", "html", "vtt", "srt", "youtube",
    # "mp3", …; "" for PDFs and images), decided from the content, not the file name.
    format = models.CharField(max_length=16, blank=True)
    # A web page or a YouTube video: where it was fetched from (the worker fetches it again
    # on "Re-fetch"); "" for uploaded files.
    source_url = models.URLField(max_length=2000, blank=True)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    page_count = models.PositiveIntegerField(null=True, blank=True)

    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    stage = models.CharField(max_length=20, choices=Stage.choices, default=Stage.QUEUED)
    progress_current = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    ocr_pages = models.PositiveIntegerField(default=0)
    password_attempts = models.PositiveSmallIntegerField(default=0)
    # Ingestion runs started; doubles as a fencing token so an abandoned run cannot write.
    attempts = models.PositiveSmallIntegerField(default=0)
    language = models.CharField(max_length=16, blank=True)
    search_config = models.CharField(max_length=32, default="simple")
    embedding_model = models.CharField(max_length=200, blank=True)
    timings = models.JSONField(default=dict, blank=True)
    # BM25 collection statistics of this file's chunks, kept with its PostingList rows
    # (see search/bm25.py): N and the total length come from here, not from a scan.
    chunk_count = models.PositiveIntegerField(default=0)
    token_total = models.PositiveBigIntegerField(default=0)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    # When its text first became keyword-searchable (the first pass committed): search finds a
    # file that is processing from then on, by keywords only, until it is ready.
    searchable_at = models.DateTimeField(null=True, blank=True)
    # A pending file waiting out a retry's backoff: no task may run it before then.
    not_before = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["note", "sha256"], name="attachment_unique_per_note")
        ]
        indexes = [models.Index(fields=["status", "heartbeat_at"])]

    def __str__(self) -> str:
        return self.original_name

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.PROCESSING)

    @property
    def keyword_searchable(self) -> bool:
        """Still being processed, but search already finds its words."""
        return self.status == self.Status.PROCESSING and self.searchable_at is not None

    @property
    def status_label(self) -> str:
        """What its status badge says."""
        if self.keyword_searchable:
            return str(gettext_lazy("Searchable by keywords"))
        return str(self.get_status_display())

    @classmethod
    def searchable_q(cls) -> models.Q:
        """The attachments search reads: ready ones, and those processing whose words are
        indexed already (the first pass's or the structured pass's rows, without vectors)."""
        return models.Q(status=cls.Status.READY) | models.Q(
            status=cls.Status.PROCESSING, searchable_at__isnull=False
        )

    @property
    def progress_percent(self) -> int:
        if self.status == self.Status.READY:
            return 100
        if not self.progress_total:
            return 0
        return min(100, round(100 * self.progress_current / self.progress_total))

    @property
    def is_image(self) -> bool:
        return self.kind == self.Kind.IMAGE

    @property
    def extension(self) -> str:
        """The stored file's extension (".pdf", ".png", …): what it is served as."""
        assert self.file.name is not None  # a stored attachment always has its file
        return PurePosixPath(self.file.name).suffix.lower() or ".pdf"

    @property
    def media_type(self) -> str:
        if self.format:  # an Office file, e-book, page, transcript or audio: downloaded only
            return "application/octet-stream"
        return _MEDIA_TYPES.get(self.extension, "application/pdf")

    @property
    def is_locked(self) -> bool:
        return self.password_attempts >= MAX_PASSWORD_ATTEMPTS


_MEDIA_TYPES = {
    ".pdf": "application/pdf",
    ".jpg": "image/jpeg",
    ".png": "image/png",
    ".gif": "image/gif",
    ".webp": "image/webp",
}


class DocumentPage(models.Model):
    """The text of one page as extracted (or OCR'd); chunks point into it by offsets."""

    attachment = models.ForeignKey(NoteAttachment, on_delete=models.CASCADE, related_name="pages")
    number = models.PositiveIntegerField()  # 1-based physical page
    text = models.TextField(blank=True)
    is_ocr = models.BooleanField(default=False)
    # The text's lines with their font: [start, end, size, bold] each ([] for OCR pages and
    # pages extracted before this was kept). Re-chunking reads them instead of the PDF.
    lines = models.JSONField(default=list, blank=True)
    # [start, end] of each running head or footer line: in no chunk; dimmed when shown.
    running = models.JSONField(default=list, blank=True)
    # A unit of a non-PDF source (attachments.formats.Unit): how citations name it ("Slide 3",
    # "Install › On Debian", "12:34"), and for transcripts where it starts. "" for PDF pages.
    label = models.CharField(max_length=300, blank=True)
    start_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["number"]
        constraints = [
            models.UniqueConstraint(fields=["attachment", "number"], name="page_unique_number")
        ]

    def __str__(self) -> str:
        return f"{self.attachment} p.{self.number}"


class DocumentChunk(models.Model):
    """A searchable passage of one page: text, heading path, offsets and tsvector; its
    embeddings are ChunkVector rows."""

    attachment = models.ForeignKey(NoteAttachment, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    page_number = models.PositiveIntegerField()
    content = models.TextField()
    heading_path = models.JSONField(default=list, blank=True)
    start_char = models.PositiveIntegerField()
    end_char = models.PositiveIntegerField()
    char_count = models.PositiveIntegerField()
    token_count = models.PositiveIntegerField()
    # Words indexed in search_vector (sum of its positions): BM25's document length.
    token_len = models.PositiveIntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True)
    search_vector = SearchVectorField(null=True)
    # The model whose vectors this chunk has in ChunkVector ("" until it is embedded).
    embedding_model = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["attachment", "index"]
        constraints = [
            models.UniqueConstraint(fields=["attachment", "index"], name="chunk_unique_index")
        ]
        indexes = [
            models.Index(fields=["attachment", "page_number"]),
            GinIndex(fields=["search_vector"], name="chunk_search_vector_gin"),
        ]

    def __str__(self) -> str:
        return f"{self.attachment} #{self.index} (p.{self.page_number})"


class PostingList(models.Model):
    """One lexeme's postings in one file: the chunks that hold it, how often, and their lengths.
    BM25 reads these instead of the chunks' tsvectors: a query touches one row per (query
    lexeme, file in scope), and a lexeme's document frequency in a scope is the sum of `df`."""

    pk = models.CompositePrimaryKey("lexeme", "attachment")
    lexeme = models.TextField()
    attachment = models.ForeignKey(NoteAttachment, on_delete=models.CASCADE, related_name="+")
    df = models.PositiveIntegerField()
    chunk_ids = ArrayField(models.BigIntegerField())
    tfs = ArrayField(models.SmallIntegerField())  # Postgres keeps at most 256 positions
    lens = ArrayField(models.IntegerField())  # the chunks' token_len

    def __str__(self) -> str:
        return f"{self.lexeme} in {self.attachment_id}: {self.df}"


class ChunkVector(models.Model):
    """One embedding of a chunk. A chunk longer than the embedding model's input is embedded
    as several overlapping windows (see Embedder.windows); vector search keeps the best one."""

    chunk = models.ForeignKey(DocumentChunk, on_delete=models.CASCADE, related_name="vectors")
    # Denormalised from the chunk so the scope filter needs no join inside the index scan.
    attachment = models.ForeignKey(NoteAttachment, on_delete=models.CASCADE, related_name="+")
    window = models.PositiveSmallIntegerField(default=0)
    embedding = VectorField(dimensions=settings.EMBEDDING_DIMENSIONS)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chunk", "window"], name="chunkvector_unique_window")
        ]
        indexes = [
            models.Index(fields=["attachment"], name="chunkvector_attachment"),
            HnswIndex(
                name="chunkvector_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.chunk} window {self.window}"


class SentenceVector(models.Model):
    """The embedding of one sentence of a chunk, kept once an answer has weighed it.

    The offline answerer (and the grounding check before a chat model writes) scores every
    sentence of the passages it found by embedding similarity to the question: without this,
    each answer embeds some 60 sentences again (about a second of CPU on a small machine).
    Rows are keyed by the sentence's digest and the model that made them, deleted with their
    chunk, and read only for chunks a search of the same user returned."""

    chunk = models.ForeignKey(DocumentChunk, on_delete=models.CASCADE, related_name="+")
    digest = models.CharField(max_length=32)  # blake2b-128 of the sentence text, hex
    model = models.CharField(max_length=200)
    embedding = models.BinaryField()  # float32, native order; any number of dimensions

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["chunk", "model", "digest"], name="sentencevector_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.chunk} sentence {self.digest[:8]}"


class VectorBuild(models.Model):
    """A re-embedding of every source and note with another embedding model, written beside
    the live vectors while search goes on using them (`manage.py reembed --background`;
    attachments.services.vectors_next). The new vectors go to a table of their own per vector
    table (`<table>_next`); once every ready source and every note has them (`complete`) and
    the settings name the new model, the tables are swapped in one short transaction
    (`switched`). At most one build is open (building or complete) at a time."""

    class State(models.TextChoices):
        BUILDING = "building", "building"
        COMPLETE = "complete", "complete"  # waiting for the settings to name the new model
        SWITCHED = "switched", "switched"
        CANCELLED = "cancelled", "cancelled"

    # The target, as EMBEDDING_BACKEND, EMBEDDING_MODEL, EMBEDDING_DIMENSIONS,
    # EMBEDDING_BASE_URL and the bundled model's runtime would name it (the API key is
    # EMBEDDING_API_KEY's, never stored).
    backend = models.CharField(max_length=20)
    model = models.CharField(max_length=500, blank=True)
    model_name = models.CharField(max_length=200)  # what chunks and notes record
    dimensions = models.PositiveIntegerField()
    base_url = models.CharField(max_length=500, blank=True)
    runtime = models.CharField(max_length=20, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.BUILDING)
    is_open = models.BooleanField(default=True)  # building or complete
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    switched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_open"], condition=models.Q(is_open=True), name="vectorbuild_one_open"
            )
        ]

    def __str__(self) -> str:
        return f"{self.model_name} ({self.dimensions}) [{self.state}]"
