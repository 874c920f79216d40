"""Images are sources too (#17): .jpg/.jpeg/.png/.gif/.webp checked by content, capped in size
and pixels, at most MAX_UPLOAD_FILES per request; OCR'd into one page, searchable and citable
like a one-page PDF; thumbnails for images and PDFs, only ever the owner's."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from PIL import Image

from attachments.models import DocumentPage, NoteAttachment
from attachments.services import AddedSource, attachment_delete, source_add
from attachments.thumbnails import thumbnail_path
from chat import services as chat_services
from chat.agent import generate
from chat.rendering import sources
from notes.models import Note
from search.retrieval import Scope, search
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import ingest, sample, text_image, upload

pytestmark = pytest.mark.django_db


def _stored_files() -> list[Path]:
    return [p for p in Path(settings.MEDIA_ROOT).rglob("*") if p.is_file()]


def attached(added: AddedSource) -> NoteAttachment:
    """The attachment an uploaded image became (an image is always attached to a note)."""
    assert added.attachment is not None
    return added.attachment


def _file(name: str, data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data)


@pytest.fixture
def notebook(alice):
    return NotebookFactory.create(owner=alice, title="Field work")


@pytest.fixture
def note(alice, notebook):
    return NoteFactory.create(notebook=notebook, author=alice, title="Birds", body="mine")


def post_files(client, where: str, notebook, note, files: list[SimpleUploadedFile]):
    if where == "page":
        return client.post(
            f"/notes/{note.pk}/attachments/", {"files": files}, headers={"X-Upload": "1"}
        )
    if where == "dropzone":
        return client.post(
            f"/notebooks/{notebook.pk}/sources/", {"files": files}, headers={"X-Upload": "1"}
        )
    return client.post(f"/api/notes/{note.pk}/attachments", {"files": files})


@pytest.mark.parametrize("where", ["page", "dropzone", "api"])
def test_an_image_uploads_is_ocrd_searchable_and_thumbnailed(
    alice, alice_client, alice_api, notebook, note, where, django_capture_on_commit_callbacks
):
    client = alice_api if where == "api" else alice_client
    started = time.monotonic()
    response = post_files(client, where, notebook, note, [_file("heron.png", text_image())])
    assert response.status_code == 201, response.content
    image = NoteAttachment.objects.get()
    assert (image.kind, image.original_name, image.status) == ("image", "heron.png", "pending")
    assert image.file.name is not None
    assert image.file.name.endswith(".png")
    if where == "api":
        assert response.json()["attachments"][0]["kind"] == "image"
    else:
        assert 'class="file-icon"' in response.content.decode()  # no thumbnail before ready
    image = ingest(image)
    assert image.status == "ready", image.error
    print(f"\nimage {where}: ready in {time.monotonic() - started:.2f}s, timings {image.timings}")
    assert (image.page_count, image.ocr_pages) == (1, 1)
    (page,) = DocumentPage.objects.filter(attachment=image)
    assert (page.number, page.is_ocr) == (1, True)
    assert "millpond" in page.text.lower()
    assert set(image.chunks.values_list("page_number", flat=True)) == {1}
    assert image.chunks.filter(embedding_model=image.embedding_model).exists()
    assert set(image.timings) >= {"ocr", "chunk", "embed", "thumbnail"}

    hits = search(
        user=alice, query="heron millpond", scope=Scope(notebook_id=notebook.pk), mode="hybrid"
    ).hits
    assert hits
    assert hits[0].attachment is not None
    assert hits[0].attachment.pk == image.pk
    assert hits[0].chunk is not None
    assert hits[0].chunk.page_number == 1

    # The download is the image, as what it is; the page text shows the OCR text.
    download = alice_client.get(f"/attachments/{image.pk}/file/")
    assert download["Content-Type"] == "image/png"
    assert b"".join(download.streaming_content).startswith(b"\x89PNG")
    assert "millpond" in alice_client.get(f"/attachments/{image.pk}/pages/").content.decode()

    thumb = alice_client.get(f"/attachments/{image.pk}/thumbnail/")
    assert thumb.status_code == 200
    assert thumb["Content-Type"] == "image/webp"
    assert thumb["Cache-Control"].startswith("private")
    with Image.open(io.BytesIO(b"".join(thumb.streaming_content))) as small:
        assert small.format == "WEBP"
        assert max(small.size) <= settings.THUMBNAIL_SIZE
    row = alice_client.get(f"/attachments/{image.pk}/row/").content.decode()
    assert f'src="/attachments/{image.pk}/thumbnail/"' in row
    source = alice_client.get(f"/attachments/{image.pk}/source/").content.decode()
    assert f'src="/attachments/{image.pk}/thumbnail/"' in source

    with django_capture_on_commit_callbacks(execute=True):
        attachment_delete(attachment=image)  # the thumbnail goes with it
    assert not thumbnail_path(image).exists()
    assert not Path(image.file.path).exists()


def test_an_offline_answer_cites_the_image_at_page_1_and_opens_it_as_an_image(alice, notebook):
    note = NoteFactory.create(notebook=notebook, author=alice, title="Survey")
    added = source_add(
        user=alice, notebook=notebook, note=note, uploaded=_file("survey.jpg", text_image("JPEG"))
    )
    image = ingest(attached(added))
    assert image.status == "ready", image.error
    assert image.file.name is not None
    assert image.file.name.endswith(".jpg")
    chat = chat_services.conversation_create(owner=alice, notebook=notebook)
    _, pending = chat_services.message_ask(
        conversation=chat, content="When did the heron wait by the millpond?"
    )
    answer = generate(pending.pk, lambda event, data: None)
    assert answer is not None
    assert answer.status == "complete", answer.error
    cited = [c for c in answer.citations if c.get("attachment_id") == image.pk]
    assert cited, answer.citations
    assert {c["page"] for c in cited} == {1}
    (shown, *_) = [s for s in sources(answer) if s.label == "survey.jpg"]
    assert shown.image
    assert shown.page == 1
    assert 'data-viewer-image="1"' in shown.viewer_attrs
    assert f'data-viewer-file="/attachments/{image.pk}/file/"' in shown.viewer_attrs


def test_image_content_decides_not_its_name(alice, alice_client, note):
    """A .png that is a JPEG is taken (and kept as what it is); .gif and .webp work too."""
    for name, data, ext in [
        ("actually-jpeg.png", text_image("JPEG"), ".jpg"),
        ("anim.gif", text_image("GIF"), ".gif"),
        ("photo.webp", text_image("WEBP"), ".webp"),
        ("upper.JPEG", text_image("JPEG", lines=["Another one"]), ".jpg"),
    ]:
        response = post_files(alice_client, "page", None, note, [_file(name, data)])
        assert response.status_code == 201, (name, response.content)
        stored = NoteAttachment.objects.get(original_name=name)
        assert (stored.kind, stored.extension) == ("image", ext)
    download = alice_client.get(
        f"/attachments/{NoteAttachment.objects.get(original_name='actually-jpeg.png').pk}/file/",
        {"download": "1"},
    )
    assert download["Content-Type"] == "image/jpeg"
    assert 'filename="actually-jpeg.png.jpg"' in download["Content-Disposition"]


def _bomb() -> bytes:
    """A PNG declaring 10,000 × 10,000 pixels (over the 40 MP cap) in a few KB."""
    out = io.BytesIO()
    Image.new("1", (10_000, 10_000)).save(out, format="PNG")
    return out.getvalue()


REFUSED = [
    ("fake.png", b"\x89PNG\r\n\x1a\n but nothing of a PNG after the signature", "not_image"),
    ("paper.png", sample("text.pdf"), "not_image"),
    ("notes.jpg", b"just some text, not a picture\n" * 20, "not_image"),
    ("vector.webp", b'<svg xmlns="http://www.w3.org/2000/svg"></svg>', "not_image"),
    ("bomb.png", _bomb(), "too_many_pixels"),
    ("empty.gif", b"", "empty"),
]


@pytest.mark.parametrize(("name", "data", "code"), REFUSED)
@pytest.mark.parametrize("where", ["page", "dropzone", "api"])
def test_refused_images_leave_nothing_behind(
    alice_client, alice_api, notebook, note, where, name, data, code
):
    notes_before = Note.objects.count()
    client = alice_api if where == "api" else alice_client
    response = post_files(client, where, notebook, note, [_file(name, data)])
    if where == "api":
        assert response.status_code == 422
        (error,) = response.json()["errors"]
        assert error["code"] == code
        text = error["detail"]
    else:
        assert response.status_code == 400
        text = response.content.decode()
    assert f"“{name}”" in text
    if code == "too_many_pixels":
        assert "the limit is 40 megapixels" in text
    elif code == "not_image":
        assert "is not a JPEG, PNG, GIF or WebP image" in text
    assert not NoteAttachment.objects.exists()
    assert Note.objects.count() == notes_before
    assert _stored_files() == []


def test_the_pixel_cap_is_a_setting(alice_client, note, settings):
    settings.IMAGE_MAX_PIXELS = 1_000_000
    big = text_image(size=(1200, 1000))  # 1.2 MP
    response = post_files(alice_client, "page", None, note, [_file("big.png", big)])
    assert response.status_code == 400
    assert "the limit is 1 megapixels" in response.content.decode()
    assert not NoteAttachment.objects.exists()


@pytest.mark.parametrize("where", ["page", "dropzone", "api"])
def test_more_than_20_files_in_one_batch_are_refused_and_nothing_is_stored(
    alice_client, alice_api, notebook, note, where
):
    notes_before = Note.objects.count()
    client = alice_api if where == "api" else alice_client
    images = [text_image(lines=[f"Picture {i}"], size=(400, 80)) for i in range(21)]
    files = [_file(f"img-{i}.png", data) for i, data in enumerate(images)]
    response = post_files(client, where, notebook, note, files)
    if where == "api":
        assert response.status_code == 422
        (error,) = response.json()["errors"]
        assert error["code"] == "too_many_files"
        text = error["detail"]
    else:
        assert response.status_code == 400
        text = response.content.decode()
    assert "21 files at once is too many: add at most 20 files at a time." in text
    assert not NoteAttachment.objects.exists()
    assert Note.objects.count() == notes_before
    assert _stored_files() == []

    # Twenty are fine.
    files = [_file(f"img-{i}.png", data) for i, data in enumerate(images[:20])]
    response = post_files(client, where, notebook, note, files)
    assert response.status_code == 201, response.content
    assert NoteAttachment.objects.count() == 20, response.content.decode()[-3000:]


def test_the_drop_zones_know_the_batch_limit(alice_client, notebook, note):
    for url in (f"/notes/{note.pk}/", f"/notebooks/{notebook.pk}/"):
        page = alice_client.get(url, follow=True).content.decode()
        assert 'data-max-files="20"' in page, url


def test_the_same_image_twice_on_a_note_is_a_duplicate_and_reused_by_hash(alice, notebook, note):
    data = text_image()
    first = ingest(
        attached(
            source_add(user=alice, notebook=notebook, note=note, uploaded=_file("a.png", data))
        )
    )
    assert first.status == "ready", first.error
    with pytest.raises(Exception, match="already attached to this note"):
        source_add(user=alice, notebook=notebook, note=note, uploaded=_file("b.png", data))
    other = NoteFactory.create(notebook=notebook, author=alice, title="Elsewhere")
    copy = ingest(
        attached(
            source_add(user=alice, notebook=notebook, note=other, uploaded=_file("c.png", data))
        )
    )
    assert copy.status == "ready", copy.error
    assert copy.timings.get("reused_from") == first.pk
    assert copy.kind == "image"
    assert list(copy.pages.values_list("number", "text")) == list(
        first.pages.values_list("number", "text")
    )
    assert thumbnail_path(copy).stat().st_size > 0


def test_a_pdf_gets_a_first_page_thumbnail_and_old_ones_are_made_on_request(
    alice, alice_client, note
):
    pdf = ingest(upload(alice, note, "text.pdf"))
    assert pdf.status == "ready", pdf.error
    path = thumbnail_path(pdf)
    assert path.stat().st_size > 0
    path.unlink()  # as for a file ingested before thumbnails existed
    response = alice_client.get(f"/attachments/{pdf.pk}/thumbnail/")
    assert response.status_code == 200
    with Image.open(io.BytesIO(b"".join(response.streaming_content))) as small:
        assert small.format == "WEBP"
        width, height = small.size
        assert height > width  # a portrait page
    assert path.exists()


def test_no_thumbnail_before_ready_or_when_none_can_be_made(alice, alice_client, note):
    pending = upload(alice, note, "other.pdf")
    assert alice_client.get(f"/attachments/{pending.pk}/thumbnail/").status_code == 404
    assert not thumbnail_path(pending).exists()
    locked = ingest(upload(alice, note, "locked.pdf"))
    NoteAttachment.objects.filter(pk=locked.pk).update(status="ready")  # as if read earlier
    assert alice_client.get(f"/attachments/{locked.pk}/thumbnail/").status_code == 404
    assert alice_client.get(f"/attachments/{locked.pk}/thumbnail/").status_code == 404  # cached


def test_another_users_thumbnail_is_a_404(alice, bob, note):
    image = ingest(
        attached(
            source_add(
                user=alice, notebook=note.notebook, note=note, uploaded=_file("a.png", text_image())
            )
        )
    )
    assert image.status == "ready", image.error
    client = Client()
    client.force_login(bob)
    response = client.get(f"/attachments/{image.pk}/thumbnail/")
    assert response.status_code == 404
    assert b"RIFF" not in response.content


def test_the_api_lists_kind(alice, alice_api, note):
    source_add(
        user=alice, notebook=note.notebook, note=note, uploaded=_file("a.gif", text_image("GIF"))
    )
    listed = alice_api.get(f"/api/notes/{note.pk}/attachments").json()
    assert [a["kind"] for a in listed] == ["image"]
    assert json.dumps(listed)


def test_an_image_without_text_or_damaged_past_its_header_fails_with_a_reason(
    alice, notebook, note
):
    blank = io.BytesIO()
    Image.new("RGB", (300, 200), "white").save(blank, format="PNG")
    added = source_add(
        user=alice, notebook=notebook, note=note, uploaded=_file("blank.png", blank.getvalue())
    )
    failed = ingest(attached(added))
    assert failed.status == "failed"
    assert (
        failed.error
        == "No text was found in this image by OCR. It may contain no readable writing."
    )
    assert not DocumentPage.objects.filter(attachment=failed).exists()

    whole = text_image("JPEG", lines=["Truncated"])
    cut = whole[: len(whole) // 2]  # the header is intact: accepted, then unreadable
    added = source_add(user=alice, notebook=notebook, note=note, uploaded=_file("cut.jpg", cut))
    failed = ingest(attached(added))
    assert failed.status == "failed"
    assert failed.error.startswith("The image cannot be read"), failed.error
    assert "PDF" not in failed.error
