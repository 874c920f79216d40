"""Sources that are not PDFs or images, read into units (#35).

A *unit* is what a PDF page is to a PDF: the span of a source a citation names and the viewer
opens. Each format module turns one file (or fetched page) into a list of `Unit`s:

- a web page or an HTML file (`web`): one unit per section (its heading path as the label);
- an Office document or an e-book (`office`): .docx/.odt/.epub by section, .pptx by slide,
  .xlsx by sheet and row range;
- a transcript (`transcripts`): .vtt/.srt (or a YouTube transcript, or an audio file's
  transcription) in windows of time, labelled `12:34`.

Ingestion stores each unit as a `DocumentPage` (`number`, `text`, `label`, `start_seconds`) and
chunks, indexes and embeds them like PDF pages; citations name the unit's label instead of
"page N". Parsing untrusted files happens in a capped child process (`attachments.pdf.child`),
never in the worker itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Unit:
    """One citable span of a source, in reading order."""

    number: int  # 1-based position in the source
    text: str  # plain text; a section's heading on its own first line
    label: str  # how a citation names it: "Introduction › Setup", "Slide 3", "12:34"
    start_seconds: float | None = None  # transcripts: where the unit starts


class FormatError(Exception):
    """The file cannot be read as what it claims to be; the message is for the user."""
