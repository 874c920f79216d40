"""Fetching a link's content in the worker: a web page (core.fetch, then
attachments.formats.web) or a YouTube video's transcript (attachments.formats.youtube), and
storing what was fetched as the source's file."""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile
from django.db import transaction

from attachments.formats import FormatError, Unit, registry
from attachments.formats.runner import read_html_page
from attachments.models import NoteAttachment
from core.fetch import FetchRefused, fetch
from core.quota import check_quota, lock_storage_of


def links_available() -> bool:
    """Whether web pages can be read here (the web format is registered)."""
    return registry.get("html") is not None


def read_web_page(url: str) -> tuple[str, list[Unit], bytes, str]:
    """(title, units, the HTML fetched, ".html") of the page at `url`, fetched through
    core.fetch (public addresses only, every redirect checked, size and time capped, no
    cookies) and read by attachments.formats.web."""
    try:
        fetched = fetch(url)
    except FetchRefused as exc:
        raise FormatError(str(exc)) from None
    # Parsed in a capped child process, like a dropped HTML file (attachments.formats.runner).
    with tempfile.NamedTemporaryFile(suffix=".html") as page:
        page.write(fetched.body)
        page.flush()
        title, _date, units = read_html_page(Path(page.name), url=fetched.url)
    return title, units, fetched.body, ".html"


def read_youtube(url: str) -> tuple[str, list[Unit], bytes, str]:
    """(title, units, the transcript as WebVTT, ".vtt") of the video at `url`: its captions
    in the first of the site's languages it has (attachments.formats.youtube)."""
    # not at import: youtube-transcript-api and requests load in the worker, when asked
    from attachments.formats.youtube import video_id, youtube_transcript

    video = video_id(url)
    if video is None:
        raise FormatError("That is not the address of a YouTube video.")
    languages = [code for code, _ in settings.LANGUAGES] + ["en"]
    title, units = youtube_transcript(video, languages=list(dict.fromkeys(languages)))
    return title, units, webvtt(units), ".vtt"


def webvtt(units: list[Unit]) -> bytes:
    """Units of time as a WebVTT file (each to the next one's start), to keep and download."""
    lines = ["WEBVTT", ""]
    for unit, after in zip(units, [*units[1:], None], strict=True):
        start = unit.start_seconds or 0.0
        end = after.start_seconds if after and after.start_seconds else start + 60.0
        lines += [f"{_stamp(start)} --> {_stamp(end)}", unit.text.replace("-->", "->"), ""]
    return "\n".join(lines).encode()


def _stamp(seconds: float) -> str:
    whole = int(seconds)
    millis = round((seconds - whole) * 1000)
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}.{millis:03d}"


def store_fetched(
    attachment: NoteAttachment, content: bytes, *, extension: str, title: str = ""
) -> None:
    """Keep what was fetched as the source's file (replacing an earlier fetch), within the
    uploader's quota; the source is named after the page's title when it has one."""
    with transaction.atomic():
        if attachment.uploaded_by_id is not None:
            lock_storage_of(user_id=attachment.uploaded_by_id)
            try:
                check_quota(
                    user_id=attachment.uploaded_by_id,
                    name=attachment.original_name,
                    size=len(content),
                    freed=attachment.size,
                )
            except ValidationError as exc:  # the run fails with the quota's own words
                raise FormatError(" ".join(exc.messages)) from None
        old = attachment.file.name
        attachment.file.save(f"{attachment.uuid}{extension}", ContentFile(content), save=False)
        fields = {"file": attachment.file.name, "size": len(content)}
        if title.strip():
            fields["original_name"] = " ".join(title.split())[:200]
        NoteAttachment.objects.filter(pk=attachment.pk).update(**fields)
        for name, value in fields.items():
            setattr(attachment, name, value)
    if old and old != attachment.file.name:
        attachment.file.storage.delete(old)
