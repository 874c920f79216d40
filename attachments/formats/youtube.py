"""A YouTube video's captions as windows of time, like a .vtt file's (`transcripts.windows`).

youtube-transcript-api does the talking to YouTube (the watch page for the API key, the
player API for the caption tracks, the timed-text XML), and takes the requests.Session it
talks through. Ours (`session`) sends only to YouTube's own hosts over HTTPS, with a timeout
on every request and a cap on each response's size, so a caption URL in YouTube's reply cannot
send the worker anywhere else. YOUTUBE_BASE_URL (default https://www.youtube.com) moves all of
it to another address: the tests' stand-in server, or a caching proxy.

The title comes from the player reply (`videoDetails.title`), seen by a response hook on the
session: the library reads that reply but keeps only the caption tracks.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit
from xml.etree.ElementTree import ParseError

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from youtube_transcript_api import (
    AgeRestricted,
    CouldNotRetrieveTranscript,
    InvalidVideoId,
    IpBlocked,
    NoTranscriptFound,
    PoTokenRequired,
    RequestBlocked,
    TranscriptsDisabled,
    VideoUnavailable,
    VideoUnplayable,
    YouTubeRequestFailed,
    YouTubeTranscriptApi,
)

from attachments.formats import FormatError, Unit
from attachments.formats.transcripts import collapse, windows

VIDEO_ID = re.compile(r"[A-Za-z0-9_-]{11}")
YOUTUBE_HOSTS = {"youtube.com", "www.youtube.com", "m.youtube.com", "music.youtube.com"}
SHORT_HOSTS = {"youtu.be", "www.youtu.be"}
DEFAULT_BASE_URL = "https://www.youtube.com"
DEFAULT_TIMEOUT = 20.0
MAX_RESPONSE_BYTES = 20 * 1024 * 1024  # a watch page is ~1 MB; hours of captions a few MB


class YouTubeError(FormatError):
    """YouTube gave no transcript; the message is for the user. `retryable`: asking again
    later may work (YouTube refused or failed, not "this video has no captions")."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def video_id(url: str) -> str | None:
    """The 11-character id of a YouTube video URL (watch?v=, youtu.be/, shorts/, embed/, live/,
    with any other parameters), or None for anything else."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https"):
        return None
    host = (parts.hostname or "").lower()
    path = [piece for piece in parts.path.split("/") if piece]
    candidate: str | None = None
    if host in SHORT_HOSTS:
        candidate = path[0] if len(path) == 1 else None
    elif host in YOUTUBE_HOSTS or host in ("youtube-nocookie.com", "www.youtube-nocookie.com"):
        if path == ["watch"]:
            values = parse_qs(parts.query).get("v") or []
            candidate = values[0] if len(values) == 1 else None
        elif len(path) == 2 and path[0] in ("shorts", "embed", "live", "v"):
            candidate = path[1]
    if candidate and VIDEO_ID.fullmatch(candidate):
        return candidate
    return None


# --- The session the library talks through


def base_url() -> str:
    return str(getattr(settings, "YOUTUBE_BASE_URL", "") or DEFAULT_BASE_URL).rstrip("/")


class TooLarge(requests.exceptions.RequestException):
    """A reply over MAX_RESPONSE_BYTES."""


class YouTubeOnly(HTTPAdapter):
    """Sends YouTube's URLs (https, YouTube's hosts) to YOUTUBE_BASE_URL with a timeout, and
    refuses every other URL."""

    def __init__(self, base: str, timeout: float) -> None:
        super().__init__(max_retries=0)
        self.base = urlsplit(base)
        self.timeout = timeout

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        parts = urlsplit(request.url or "")
        if parts.scheme != "https" or (parts.hostname or "").lower() not in YOUTUBE_HOSTS:
            raise requests.exceptions.InvalidURL(f"not a YouTube URL: {parts.netloc}")
        path = self.base.path.rstrip("/") + parts.path
        request.url = urlunsplit((self.base.scheme, self.base.netloc, path, parts.query, ""))
        kwargs["timeout"] = kwargs.get("timeout") or self.timeout
        kwargs["stream"] = True
        response = super().send(request, **kwargs)
        body = response.raw.read(MAX_RESPONSE_BYTES + 1, decode_content=True)
        response.close()
        if len(body) > MAX_RESPONSE_BYTES:
            raise TooLarge(f"YouTube's reply is over {MAX_RESPONSE_BYTES:,} bytes")
        response._content = body
        response._content_consumed = True
        return response


def session(seen: dict[str, Any]) -> requests.Session:
    """A session for youtube-transcript-api: YouTube's hosts only (`YouTubeOnly`), no proxy
    from the environment, and the video's title put into `seen["title"]` when the player reply
    passes."""
    timeout = float(getattr(settings, "YOUTUBE_TIMEOUT", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT)
    http = requests.Session()
    http.trust_env = False
    adapter = YouTubeOnly(base_url(), timeout)
    http.mount("https://", adapter)
    http.mount("http://", adapter)

    def remember_title(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        if "/youtubei/v1/player" not in (response.url or "") or not response.ok:
            return
        try:
            data = response.json()
        except ValueError:
            return
        details = data.get("videoDetails") if isinstance(data, dict) else None
        title = details.get("title") if isinstance(details, dict) else None
        if isinstance(title, str) and title.strip():
            seen["title"] = " ".join(title.split())[:300]

    http.hooks["response"].append(remember_title)
    return http


# --- The transcript


def youtube_transcript(video: str, *, languages: list[str]) -> tuple[str, list[Unit]]:
    """The video's title and its captions in the first of `languages` it has (captions
    written by people before YouTube's automatic ones), as windows of time. `video`: an id or
    a URL. Raises YouTubeError (a FormatError) with a message for the user."""
    vid = video if VIDEO_ID.fullmatch(video) else video_id(video)
    if vid is None:
        raise YouTubeError(f"This is not a YouTube video link: {video[:200]}", retryable=False)
    seen: dict[str, Any] = {}
    http = session(seen)
    wanted = [code for code in languages if code] or ["en"]
    try:
        listing = YouTubeTranscriptApi(http_client=http).list(vid)
        try:
            track = listing.find_transcript(wanted)
        except NoTranscriptFound:
            # Any language rather than none: the answer model reads most languages.
            track = next(iter(listing))
        fetched = track.fetch()
    except StopIteration:
        raise YouTubeError("This YouTube video has no captions.", retryable=False) from None
    except CouldNotRetrieveTranscript as exc:
        raise refusal(exc) from exc
    except requests.exceptions.InvalidURL as exc:  # a caption URL outside YouTube
        raise YouTubeError(
            "YouTube sent a reply the app cannot read; try later.", retryable=True
        ) from exc
    except TooLarge as exc:
        raise YouTubeError(
            "YouTube sent a reply too large to be a transcript; try later.", retryable=True
        ) from exc
    except requests.RequestException as exc:
        raise YouTubeError(
            f"YouTube did not answer ({type(exc).__name__}); try later.", retryable=True
        ) from exc
    except (ParseError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise YouTubeError(
            "YouTube sent a reply the app cannot read; try later.", retryable=True
        ) from exc
    finally:
        http.close()
    cues = [(s.start, s.start + max(s.duration, 0.0), s.text) for s in fetched.snippets]
    units = windows(collapse(cues))
    if not units:
        raise YouTubeError("This YouTube video's captions are empty.", retryable=False)
    title = seen.get("title") or f"YouTube video {vid}"
    return str(title), units


def refusal(exc: CouldNotRetrieveTranscript) -> YouTubeError:
    """The library's error as a sentence for the user (its own messages are for developers)."""
    if isinstance(exc, IpBlocked | RequestBlocked):
        return YouTubeError(
            "YouTube refused the request (it limits automated requests from this server); "
            "try later.",
            retryable=True,
        )
    if isinstance(exc, TranscriptsDisabled):
        return YouTubeError("This YouTube video has no captions.", retryable=False)
    if isinstance(exc, VideoUnavailable | InvalidVideoId):
        return YouTubeError("This YouTube video does not exist or was removed.", retryable=False)
    if isinstance(exc, AgeRestricted):
        return YouTubeError(
            "This YouTube video is age-restricted; its captions need a signed-in account.",
            retryable=False,
        )
    if isinstance(exc, VideoUnplayable):
        return YouTubeError("YouTube does not play this video here.", retryable=False)
    if isinstance(exc, PoTokenRequired):
        return YouTubeError(
            "YouTube asks for a browser check before giving this video's captions; try later.",
            retryable=True,
        )
    if isinstance(exc, YouTubeRequestFailed):
        return YouTubeError(
            f"YouTube refused the request ({exc.reason.split(' for url')[0][:120]}); try later.",
            retryable=True,
        )
    return YouTubeError("YouTube gave no transcript for this video; try later.", retryable=True)
