"""YouTube captions through youtube-transcript-api, against a local stand-in for YouTube."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from attachments.formats import FormatError
from attachments.formats.youtube import YouTubeError, session, video_id, youtube_transcript
from tests.fake_youtube import API_KEY, FakeYouTube, Video, fake_youtube_server

VID = "dQw4w9WgXcQ"


@pytest.fixture
def youtube(settings) -> Iterator[FakeYouTube]:
    with fake_youtube_server() as fake:
        settings.YOUTUBE_BASE_URL = fake.url
        settings.YOUTUBE_TIMEOUT = 5
        yield fake


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"https://www.youtube.com/watch?v={VID}", VID),
        (f"https://youtube.com/watch?v={VID}&t=42s&list=PL123", VID),
        (f"https://www.youtube.com/watch?feature=share&v={VID}", VID),
        (f"https://m.youtube.com/watch?v={VID}", VID),
        (f"https://youtu.be/{VID}", VID),
        (f"https://youtu.be/{VID}?si=abc&t=10", VID),
        (f"https://www.youtube.com/shorts/{VID}", VID),
        (f"https://www.youtube.com/embed/{VID}?start=5", VID),
        (f"https://www.youtube-nocookie.com/embed/{VID}", VID),
        (f"https://youtube-nocookie.com/embed/{VID}", VID),
        (f"https://www.youtube.com/live/{VID}", VID),
        (f"  https://www.youtube.com/watch?v={VID}  ", VID),
        ("https://www.youtube.com/watch?v=short", None),
        (f"https://www.youtube.com/watch?v={VID}x", None),
        ("https://www.youtube.com/channel/UC1234567890", None),
        ("https://www.youtube.com/", None),
        (f"https://evil.example/watch?v={VID}", None),
        (f"https://www.youtube.com.evil.example/watch?v={VID}", None),
        (f"ftp://youtu.be/{VID}", None),
        (f"https://youtu.be/{VID}/extra", None),
        ("not a url at all", None),
        ("http://[::1", None),
        ("", None),
    ],
)
def test_video_id(url: str, expected: str | None):
    assert video_id(url) == expected


def test_captions_become_windows_with_the_videos_title(youtube: FakeYouTube):
    snippets = [(float(i * 10), 9.5, f"part {i} &amp; <b>more</b>") for i in range(9)]
    youtube.videos[VID] = Video(title="  How   bees dance ", tracks={"en": (snippets, False)})

    title, units = youtube_transcript(f"https://youtu.be/{VID}", languages=["en"])

    assert title == "How bees dance"
    assert [u.label for u in units] == ["0:00", "1:00"]
    assert [u.start_seconds for u in units] == [0.0, 60.0]
    assert units[0].text.splitlines()[0] == "part 0 & more"
    assert len(units[0].text.splitlines()) == 6
    # What the library asked for, in order: the page, the player API (with the page's key),
    # the caption track the player named.
    asked = [(r["method"], r["path"]) for r in youtube.requests]
    assert asked == [
        ("GET", "/watch"),
        ("POST", "/youtubei/v1/player"),
        ("GET", "/api/timedtext"),
    ]
    assert youtube.requests[1]["query"]["key"] == API_KEY
    assert youtube.requests[1]["body"]["videoId"] == VID


def test_the_first_wanted_language_wins_and_people_beat_machines(youtube: FakeYouTube):
    youtube.videos[VID] = Video(
        title="t",
        tracks={
            "de": ([(0.0, 2.0, "Hallo")], True),
            "en": ([(0.0, 2.0, "Hello")], True),
            "fr": ([(0.0, 2.0, "Bonjour")], False),
        },
    )
    assert youtube_transcript(VID, languages=["de", "en"])[1][0].text == "Hallo"
    assert youtube_transcript(VID, languages=["xx", "en"])[1][0].text == "Hello"
    # None of the wanted languages: any track rather than none.
    assert youtube_transcript(VID, languages=["xx"])[1][0].text in {"Hallo", "Hello", "Bonjour"}


def test_rolling_automatic_captions_are_collapsed(youtube: FakeYouTube):
    snippets = [
        (0.0, 2.0, "so today we"),
        (2.0, 2.0, "so today we\nlook at hives"),
        (4.0, 2.0, "look at hives\nand their queens"),
    ]
    youtube.videos[VID] = Video(title="t", tracks={"en": (snippets, True)})
    [unit] = youtube_transcript(VID, languages=["en"])[1]
    assert unit.text == "so today we\nlook at hives\nand their queens"


def test_a_video_without_captions_says_so(youtube: FakeYouTube):
    youtube.videos[VID] = Video(title="Silent film")
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript(VID, languages=["en"])
    assert str(caught.value) == "This YouTube video has no captions."
    assert not caught.value.retryable
    assert isinstance(caught.value, FormatError)


def test_a_missing_video_says_so(youtube: FakeYouTube):
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript(VID, languages=["en"])
    assert "does not exist" in str(caught.value)
    assert not caught.value.retryable


@pytest.mark.parametrize("status", [429, 403, 503])
def test_a_refusing_youtube_says_try_later(youtube: FakeYouTube, status: int):
    youtube.status = status
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript(VID, languages=["en"])
    assert str(caught.value).startswith("YouTube refused")
    assert "try later" in str(caught.value)
    assert caught.value.retryable
    assert "127.0.0.1" not in str(caught.value)


def test_a_robot_check_page_says_try_later(youtube: FakeYouTube):
    youtube.recaptcha = True
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript(VID, languages=["en"])
    assert str(caught.value).startswith("YouTube refused")
    assert caught.value.retryable


def test_a_bot_check_in_the_player_reply_says_try_later(youtube: FakeYouTube):
    youtube.videos[VID] = Video(
        title="t",
        tracks={"en": ([(0.0, 1.0, "hi")], False)},
        playability={"status": "LOGIN_REQUIRED", "reason": "Sign in to confirm you’re not a bot"},
    )
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript(VID, languages=["en"])
    assert str(caught.value).startswith("YouTube refused")


def test_junk_from_youtube_is_a_clear_error(youtube: FakeYouTube):
    youtube.junk = True
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript(VID, languages=["en"])
    assert caught.value.retryable
    assert "YouTube" in str(caught.value)


def test_junk_captions_are_a_clear_error(youtube: FakeYouTube):
    youtube.videos[VID] = Video(
        title="t", tracks={"en": ([], False)}, captions_xml="<transcript><text start="
    )
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript(VID, languages=["en"])
    assert "cannot read" in str(caught.value)


def test_empty_captions_are_a_clear_error(youtube: FakeYouTube):
    youtube.videos[VID] = Video(title="t", tracks={"en": ([(0.0, 1.0, "  ")], False)})
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript(VID, languages=["en"])
    assert "empty" in str(caught.value)


def test_a_video_that_is_not_a_youtube_link_is_refused():
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript("https://example.com/video.mp4", languages=["en"])
    assert "not a YouTube video link" in str(caught.value)


def test_the_session_sends_nowhere_but_youtube(youtube: FakeYouTube):
    http = session({})
    with pytest.raises(requests.exceptions.InvalidURL):
        http.get("https://evil.example/api/timedtext")
    with pytest.raises(requests.exceptions.InvalidURL):
        http.get("http://www.youtube.com/watch?v=x")  # not https
    with pytest.raises(requests.exceptions.InvalidURL):
        http.get("https://127.0.0.1/")
    assert youtube.requests == []
    assert http.get(f"https://www.youtube.com/watch?v={VID}").ok
    assert youtube.requests[0]["path"] == "/watch"


def test_a_caption_url_pointing_elsewhere_is_not_followed(youtube: FakeYouTube):
    # A tampered player reply naming the cloud metadata address as the caption track.
    youtube.videos[VID] = Video(
        title="t", tracks={"en": ([(0.0, 1.0, "hi")], False)}, caption_host="169.254.169.254"
    )
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript(VID, languages=["en"])
    assert "cannot read" in str(caught.value)
    assert [r["path"] for r in youtube.requests] == ["/watch", "/youtubei/v1/player"]


def test_an_oversized_reply_is_cut_off(youtube: FakeYouTube, monkeypatch):
    monkeypatch.setattr("attachments.formats.youtube.MAX_RESPONSE_BYTES", 40)
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript(VID, languages=["en"])
    assert "too large" in str(caught.value)
    assert [r["path"] for r in youtube.requests] == ["/watch"]


def test_a_hanging_youtube_times_out(youtube: FakeYouTube, settings):
    settings.YOUTUBE_TIMEOUT = 0.5
    youtube.hang = 10
    with pytest.raises(YouTubeError) as caught:
        youtube_transcript(VID, languages=["en"])
    assert "did not answer" in str(caught.value)
    assert caught.value.retryable
