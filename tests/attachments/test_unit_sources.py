"""Sources read into units (#35), end to end through the real services and ingestion: an
uploaded HTML page and a web page added by its address (fetched from a local server through
core.fetch) become sources whose sections are stored as labelled pages, searched, answered
from with a citation naming the section, and shown in the reader view with the quote marked.
A file whose content is not what its name says is refused before anything is stored."""

from __future__ import annotations

import io
import threading
import wave
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile

from attachments.models import NoteAttachment
from attachments.services import source_add, source_add_link
from chat import services as chat_services
from chat.agent import generate
from notes.services import note_create, notebook_create
from search.retrieval import search
from tests.fake_transcription import fake_transcription_server
from tests.fake_youtube import Video, fake_youtube_server
from tests.fixtures.documents import ingest

pytestmark = pytest.mark.django_db

PAGE = b"""<!doctype html><html><head><title>Heron field guide</title></head><body>
<nav><a href="/">Home</a> <a href="/about">About</a></nav>
<article><h1>Heron field guide</h1>
<p>Herons are long-legged wading birds found near fresh water across the world.</p>
<h2>Nesting</h2>
<p>The grey heron nests in colonies called heronries, high in tall trees beside lakes.
Each pair raises three to five chicks every spring, and both parents feed the young.</p>
<h2>Feeding</h2>
<p>Herons stand motionless in shallow water and strike fish with their sharp bills.
They also eat frogs, small mammals and insects when fish are scarce.</p>
</article><footer>Cookie settings</footer></body></html>"""


@pytest.fixture
def notebook(alice):
    return notebook_create(owner=alice, title="Birds")


def html_upload(name: str = "herons.html", data: bytes = PAGE) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, "text/html")


def test_an_html_file_becomes_a_source_cited_by_its_section(alice, alice_client, notebook):
    added = source_add(user=alice, notebook=notebook, uploaded=html_upload())
    attachment = added.attachment
    assert attachment is not None
    assert (attachment.kind, attachment.format) == ("document", "html")
    attachment = ingest(attachment)
    assert attachment.status == "ready", attachment.error
    labels = list(attachment.pages.order_by("number").values_list("label", flat=True))
    assert "Nesting" in labels
    assert "Feeding" in labels
    nesting = attachment.pages.get(label="Nesting")
    assert "heronries" in nesting.text
    assert "Cookie settings" not in " ".join(p.text for p in attachment.pages.all())
    assert any(c.metadata.get("unit") == "Nesting" for c in attachment.chunks.all())

    hits = search(user=alice, query="where do grey herons nest", mode="lexical", limit=5).hits
    assert hits
    assert hits[0].chunk is not None
    assert hits[0].chunk.attachment_id == attachment.pk
    found = alice_client.get("/search/", {"q": "grey herons nest", "mode": "lexical"})
    assert '<span class="hit-page">Nesting</span>' in found.content.decode()

    conversation = chat_services.conversation_create(owner=alice, notebook=notebook)
    _, pending = chat_services.message_ask(
        conversation=conversation, content="Where do grey herons nest?"
    )
    answer = generate(pending.pk, lambda event, data: None)
    assert answer is not None
    cited = [c for c in answer.citations if c.get("attachment_id") == attachment.pk]
    assert cited, answer.citations
    assert cited[0]["where"] == "Nesting"
    page = alice_client.get(f"/chats/{conversation.pk}/").content.decode()
    assert "herons.html, Nesting" in page or "Heron field guide" in page

    reader = alice_client.get(
        f"/attachments/{attachment.pk}/pages/",
        {"page": nesting.number, "quote": "nests in colonies called heronries"},
    ).content.decode()
    assert "<h2>Nesting</h2>" in reader
    assert "The cited quote is marked below." in reader
    assert "<mark" in reader
    # Never shown from our origin: the original is saved, not opened.
    download = alice_client.get(f"/attachments/{attachment.pk}/file/")
    assert download["Content-Type"] == "application/octet-stream"
    assert download["Content-Disposition"].startswith("attachment;")


def test_a_file_named_html_that_is_something_else_is_refused(alice, notebook):
    for data in (b"%PDF-1.7\n...", b"PK\x03\x04junk", b"\x00\x01\x02 not a page"):
        with pytest.raises(ValidationError) as refused:
            source_add(user=alice, notebook=notebook, uploaded=html_upload(data=data))
        assert "is not a real HTML page" in " ".join(refused.value.messages)
    assert not NoteAttachment.objects.exists()


@pytest.mark.parametrize(
    ("language", "name", "expected"),
    [("de", "herons.html", "HTML-Seite"), ("zh-hans", "talk.vtt", "WebVTT 转录文本")],
)
def test_the_refusal_names_the_format_in_the_users_language(alice, notebook, language, name,
                                                            expected):  # fmt: skip
    from django.utils import translation

    with translation.override(language), pytest.raises(ValidationError) as refused:
        source_add(user=alice, notebook=notebook, uploaded=html_upload(name, b"%PDF-1.7\n..."))
    assert expected in " ".join(refused.value.messages)


class _Site(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def site(settings) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    port = server.server_address[1]
    settings.FETCH_ALLOWED_HOSTS = [f"localhost:{port}"]  # a loopback test site, named
    try:
        yield f"http://localhost:{port}/guide"
    finally:
        server.shutdown()


def test_a_link_is_fetched_read_and_named_after_its_title(alice, notebook, site):
    attachment = source_add_link(user=alice, notebook=notebook, url=site)
    assert (attachment.kind, attachment.format, attachment.source_url) == ("web", "html", site)
    attachment = ingest(attachment)
    assert attachment.status == "ready", attachment.error
    assert attachment.original_name == "Heron field guide"
    assert attachment.size == len(PAGE)
    assert "Feeding" in attachment.pages.values_list("label", flat=True)
    with pytest.raises(ValidationError):  # the same address twice in one notebook
        source_add_link(user=alice, notebook=notebook, url=site)


def test_links_to_private_addresses_fail_with_the_reason(alice, notebook, settings):
    settings.FETCH_ALLOWED_HOSTS = []
    attachment = ingest(source_add_link(user=alice, notebook=notebook, url="http://127.0.0.1/x"))
    assert attachment.status == "failed"
    assert attachment.error == "That address is this machine itself; Notebook does not fetch it."


@pytest.mark.parametrize(
    "url", ["ftp://example.org/a", "javascript:alert(1)", "https://user:pw@example.org/", "", "x"]
)
def test_links_that_are_not_web_addresses_are_refused(alice, notebook, url):
    with pytest.raises(ValidationError):
        source_add_link(user=alice, notebook=notebook, url=url)
    assert not NoteAttachment.objects.exists()


def test_the_workspace_offers_add_a_link_and_the_api_takes_one(alice, alice_client, alice_api):
    book = notebook_create(owner=alice, title="Links")
    note_create(notebook=book, author=alice, title="n")
    page = alice_client.get(f"/notebooks/{book.pk}/").content.decode()
    assert 'data-testid="add-link"' in page
    response = alice_api.post(
        f"/api/notebooks/{book.pk}/links", {"url": "ftp://example.org/"},
        content_type="application/json",
    )  # fmt: skip
    assert response.status_code == 422
    response = alice_api.post(
        f"/api/notebooks/{book.pk}/links", {"url": "https://example.org/article"},
        content_type="application/json",
    )  # fmt: skip
    assert response.status_code == 201, response.content
    assert response.json()["kind"] == "web"
    assert response.json()["source_url"] == "https://example.org/article"


# --- transcripts, audio, YouTube ---------------------------------------------------------------

VTT = b"""WEBVTT

00:00:01.000 --> 00:00:04.000
<v Ana>Welcome to the beekeeping course.

00:00:30.000 --> 00:00:34.000
<v Ana>First, light the smoker before you open the hive.

00:01:10.000 --> 00:01:15.000
<v Ben>Queens are marked with a dot of paint so that they are easy to find.
"""


def test_a_transcript_is_cited_by_its_time_and_read_at_it(alice, alice_client, notebook):
    added = source_add(
        user=alice, notebook=notebook, uploaded=SimpleUploadedFile("course.vtt", VTT, "text/vtt")
    )
    assert added.attachment is not None
    attachment = ingest(added.attachment)
    assert (attachment.kind, attachment.format, attachment.status) == ("transcript", "vtt", "ready")
    pages = list(attachment.pages.order_by("number"))
    assert [p.label for p in pages] == ["0:01", "1:10"]
    assert pages[1].start_seconds == 70.0
    assert "Ben: Queens are marked" in pages[1].text
    # The first line of speech is no heading: chunks carry no heading path from it.
    assert all(not c.heading_path for c in attachment.chunks.all())
    conversation = chat_services.conversation_create(owner=alice, notebook=notebook)
    _, pending = chat_services.message_ask(
        conversation=conversation, content="How are queens marked?"
    )
    answer = generate(pending.pk, lambda event, data: None)
    assert answer is not None
    (cited, *_) = [c for c in answer.citations if c.get("attachment_id") == attachment.pk]
    assert cited["where"] == "1:10"
    reader = alice_client.get(f"/attachments/{attachment.pk}/pages/").content.decode()
    assert "<h2>1:10</h2>" in reader
    assert 'href="#page-2" title="1:10">1:10</a>' in reader


def _wav(seconds: float = 0.5) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\x00\x00" * int(8000 * seconds))
    return buffer.getvalue()


def test_audio_is_refused_without_a_transcription_server(alice, notebook, settings):
    settings.TRANSCRIPTION_MODEL = ""
    with pytest.raises(ValidationError) as refused:
        source_add(user=alice, notebook=notebook, uploaded=SimpleUploadedFile("talk.wav", _wav()))
    assert "TRANSCRIPTION_MODEL" in " ".join(refused.value.messages)
    assert not NoteAttachment.objects.exists()


def test_audio_is_transcribed_into_times(alice, notebook, settings):
    with fake_transcription_server() as fake:
        fake.segments = [
            {"start": 0.0, "end": 4.0, "text": "Bees dance to say where the flowers are."},
            {"start": 75.0, "end": 80.0, "text": "The waggle dance points at the sun."},
        ]
        settings.TRANSCRIPTION_BASE_URL = fake.url
        settings.TRANSCRIPTION_MODEL = "whisper-1"
        settings.TRANSCRIPTION_API_KEY = "audio-key"
        settings.TRANSCRIPTION_TIMEOUT = 5
        added = source_add(
            user=alice, notebook=notebook, uploaded=SimpleUploadedFile("talk.wav", _wav())
        )
        assert added.attachment is not None
        attachment = ingest(added.attachment)
    assert (attachment.kind, attachment.format, attachment.status) == ("audio", "wav", "ready")
    assert list(attachment.pages.values_list("label", flat=True)) == ["0:00", "1:15"]
    assert fake.requests[0].fields["model"] == ["whisper-1"]


def test_a_youtube_link_becomes_its_transcript(alice, notebook, settings):
    video = "dQw4w9WgXcQ"
    with fake_youtube_server() as fake:
        fake.videos[video] = Video(
            title="How hives work",
            tracks={"en": ([(0.0, 4.0, "Hives hold up to sixty thousand bees."),
                            (65.0, 4.0, "Worker bees build the comb from wax.")], False)},
        )  # fmt: skip
        settings.YOUTUBE_BASE_URL = fake.url
        settings.YOUTUBE_TIMEOUT = 5
        attachment = source_add_link(
            user=alice, notebook=notebook, url=f"https://youtu.be/{video}?t=3"
        )
        assert (attachment.kind, attachment.format) == ("transcript", "youtube")
        attachment = ingest(attachment)
    assert attachment.status == "ready", attachment.error
    assert attachment.original_name == "How hives work"
    assert list(attachment.pages.values_list("label", flat=True)) == ["0:00", "1:05"]
    stored = attachment.file.open("rb").read()
    assert stored.startswith(b"WEBVTT")
    assert b"Worker bees build the comb" in stored


# --- Office documents and e-books --------------------------------------------------------------


def _slides() -> bytes:
    from pptx import Presentation

    deck = Presentation()
    slides = [
        ("Hive inspection", "Check the brood pattern every week."),
        ("Swarming", "Colonies swarm when the hive gets crowded in May."),
    ]
    for title, body in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def test_slides_are_cited_by_their_number(alice, alice_client, notebook):
    added = source_add(
        user=alice, notebook=notebook, uploaded=SimpleUploadedFile("bees.pptx", _slides())
    )
    assert added.attachment is not None
    attachment = ingest(added.attachment)
    assert (attachment.kind, attachment.format, attachment.status) == ("document", "pptx", "ready")
    assert list(attachment.pages.values_list("label", flat=True)) == [
        "Slide 1: Hive inspection", "Slide 2: Swarming",
    ]  # fmt: skip
    conversation = chat_services.conversation_create(owner=alice, notebook=notebook)
    _, pending = chat_services.message_ask(
        conversation=conversation, content="When do colonies swarm?"
    )
    answer = generate(pending.pk, lambda event, data: None)
    assert answer is not None
    (cited, *_) = [c for c in answer.citations if c.get("attachment_id") == attachment.pk]
    assert cited["where"] == "Slide 2: Swarming"
    page = alice_client.get(f"/chats/{conversation.pk}/").content.decode()
    assert "bees.pptx, Slide 2: Swarming" in page


CONTENT_TYPES = (
    '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
    'content-types"><Override PartName="/word/document.xml" ContentType="application/'
    'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)


def test_a_zip_bomb_named_docx_is_refused_or_fails_cleanly(alice, notebook):
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", CONTENT_TYPES)
        archive.writestr("word/document.xml", b"\0" * (300 * 1024 * 1024))
    try:
        added = source_add(
            user=alice,
            notebook=notebook,
            uploaded=SimpleUploadedFile("bomb.docx", buffer.getvalue()),
        )
    except ValidationError:
        assert not NoteAttachment.objects.exists()  # refused at the door
        return
    assert added.attachment is not None
    attachment = ingest(added.attachment)
    assert attachment.status == "failed"
    assert "zip bomb" in attachment.error or "unpacks to more than" in attachment.error
