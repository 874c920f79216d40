"""Audio overviews: a transcript made of the briefing's verified quotes, spoken by Piper (the
local engine, for real) or by a speech server (a local fake speaking OpenAI's
/v1/audio/speech, with its 429s, failures, junk and refusals), in slices that are each a job
of their own, joined into one MP3 whose length the transcript's timings match."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
import soundfile
from django.core.files.storage import default_storage
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from core import fencing
from core.models import Job
from grounding.citations import MARKER
from studio import services
from studio.models import StudioOutput
from studio.services import audio
from tests.factories import UserFactory
from tests.fake_speech import fake_speech_server
from tests.studio.test_outputs import assert_every_citation_verified, assert_no_boilerplate

pytestmark = pytest.mark.django_db


def create(library, **scope) -> StudioOutput:
    return services.output_create(user=library.alice, notebook_id=library.book.pk, kind="audio",
                                  **scope)  # fmt: skip


def slices(output: StudioOutput) -> list[Job]:
    return list(Job.objects.filter(func=audio.TASK, args__0=output.pk).order_by("pk"))


def drain(output: StudioOutput, *, limit: int = 200) -> int:
    """Run the output's queued slices as a worker would, in order; how many ran."""
    ran = 0
    while ran < limit:
        queued = [j for j in slices(output) if j.state == Job.State.PENDING]
        if not queued:
            return ran
        for job in queued:
            Job.objects.filter(pk=job.pk).update(state=Job.State.DONE)
            services.output_speak(output_id=int(job.args[0]), token=int(job.args[1]))
            ran += 1
    raise AssertionError("the speech never finished")


def decoded(output: StudioOutput) -> tuple[float, int]:
    with output.audio.open("rb") as handle:
        data, rate = soundfile.read(io.BytesIO(handle.read()))
    return len(data) / rate, rate


@pytest.fixture
def speech_server(settings, library):
    with fake_speech_server() as server:
        settings.SPEECH_MODEL = "fake-tts"
        settings.SPEECH_BASE_URL = server.url
        settings.SPEECH_API_KEY = "speech-key"
        settings.SPEECH_VOICES = ["alloy", "echo"]
        settings.SPEECH_TIMEOUT = 5.0
        yield server


def parts() -> list[str]:
    """The WAV parts left in storage."""
    if not default_storage.exists(audio.PARTS):
        return []
    return default_storage.listdir(audio.PARTS)[1]


def lines(output: StudioOutput) -> list[dict[str, Any]]:
    return audio.lines_of(output.content)


def test_offline_overview_is_the_briefing_read_by_two_piper_voices(library, settings):
    settings.STUDIO_SPEECH_SLICE_SECONDS = 0.0  # one line per job
    others = f'["attachment:{library.bees.pk}", "attachment:{library.sailing.pk}"]'
    output = create(library, excluded=others)  # the history alone: a short overview
    services.output_write(output_id=output.pk, token=output.token)
    ran = drain(output)
    output.refresh_from_db()
    assert output.status == "ready", output.error
    assert str(output.audio.name).endswith(".mp3")
    seconds, _rate = decoded(output)
    said = lines(output)
    assert ran == len(said) - 1  # the first line by the writing job, then a job per line
    # The file is as long as the transcript says, and the lines follow each other.
    assert seconds == pytest.approx(output.content["audio"]["seconds"], abs=0.2)
    assert said[-1]["end"] <= seconds + 0.1
    starts = [line["start"] for line in said]
    assert starts == sorted(starts)
    assert all(line["end"] > line["start"] for line in said)
    assert {line["speaker"] for line in said} == {0, 1}
    # The reader's lines are the briefing's verified quotes; the host's, short frames.
    quoted = [line for line in said if line.get("cited", True)]
    assert quoted
    assert all(line["speaker"] == 1 and MARKER.search(line["text"]) for line in quoted)
    assert all(line["speaker"] == 0 for line in said if line.get("cited") is False)
    assert_every_citation_verified(output)
    assert_no_boilerplate(output)
    assert output.content["audio"]["engine"].startswith("Piper")
    assert not parts()  # the parts are gone


def test_a_speech_server_speaks_each_line_in_its_speakers_voice(library, speech_server, settings):
    settings.STUDIO_SPEECH_SLICE_SECONDS = 0.0  # one line per job
    output = create(library)
    services.output_write(output_id=output.pk, token=output.token)
    assert output.created_by_id == library.alice.pk
    queued = slices(output)
    assert queued
    assert all(job.user_id == library.alice.pk for job in queued)
    drain(output)
    output.refresh_from_db()
    assert output.status == "ready", output.error
    said = lines(output)
    assert len(speech_server.requests) == len(said)
    assert len(slices(output)) == len(said) - 1  # the first line is spoken by the writing job
    for line, request in zip(said, speech_server.requests, strict=True):
        assert request["model"] == "fake-tts"
        assert request["voice"] == ("alloy", "echo")[line["speaker"]]
        assert request["response_format"] == "wav"
        assert "[" not in request["input"]  # markers are not read out
    assert set(speech_server.auth) == {"Bearer speech-key"}
    seconds, _rate = decoded(output)
    assert seconds == pytest.approx(output.content["audio"]["seconds"], abs=0.2)
    assert output.content["audio"]["engine"] == f"fake-tts on {speech_server.url.split('/')[2]}"


def test_a_busy_server_is_asked_again_after_the_pause_it_names(library, speech_server):
    speech_server.script = [429]
    speech_server.retry_after = "7"
    output = create(library)
    services.output_write(output_id=output.pk, token=output.token)
    output.refresh_from_db()
    assert output.status == "processing"
    (job,) = slices(output)
    assert job.not_before is not None
    wait = (job.not_before - timezone.now()).total_seconds()
    assert 5 < wait <= 7
    drain(output)
    output.refresh_from_db()
    assert output.status == "ready", output.error
    assert output.content["audio"]["retries"] == 1


@pytest.mark.parametrize(
    ("script", "body", "message"),
    [
        ([401], None, "refused the API key"),
        ([], b"<html>proxy error</html>", "not audio"),
        ([500] * 10, None, "HTTP 500"),
    ],
)
def test_a_failing_server_fails_the_output_with_nothing_half_written(
    library, speech_server, script, body, message
):
    speech_server.script = list(script)
    speech_server.body = body
    output = create(library)
    services.output_write(output_id=output.pk, token=output.token)
    drain(output)
    output.refresh_from_db()
    assert output.status == "failed"
    assert message in output.error
    assert not output.audio
    assert not parts()


def test_cancel_and_regenerate_stop_the_speech_and_replace_the_file(library, speech_server,
                                                                     settings):  # fmt: skip
    settings.STUDIO_SPEECH_SLICE_SECONDS = 0.0
    output = create(library)
    services.output_write(output_id=output.pk, token=output.token)
    assert parts()  # a first part is spoken
    services.output_cancel(user=library.alice, output_id=output.pk)
    drain(output)
    output.refresh_from_db()
    assert output.status == "cancelled"
    assert not output.audio
    assert not parts()

    services.output_regenerate(user=library.alice, output_id=output.pk)
    output.refresh_from_db()
    services.output_write(output_id=output.pk, token=output.token)
    drain(output)
    output.refresh_from_db()
    first = str(output.audio.name)
    assert output.status == "ready"
    assert default_storage.exists(first)

    services.output_regenerate(user=library.alice, output_id=output.pk)
    output.refresh_from_db()
    services.output_write(output_id=output.pk, token=output.token)
    drain(output)
    output.refresh_from_db()
    assert output.status == "ready"
    assert output.audio.name != first
    assert default_storage.exists(str(output.audio.name))
    assert not default_storage.exists(first)


def test_deleting_an_overview_removes_its_file(library, speech_server,
                                               django_capture_on_commit_callbacks):  # fmt: skip
    output = create(library)
    services.output_write(output_id=output.pk, token=output.token)
    drain(output)
    output.refresh_from_db()
    name = str(output.audio.name)
    assert default_storage.exists(name)
    with django_capture_on_commit_callbacks(execute=True):
        services.output_delete(user=library.alice, output_id=output.pk)
    assert not default_storage.exists(name)


def test_a_lost_slice_is_requeued_by_the_reaper(library, speech_server, settings):
    settings.STUDIO_SPEECH_SLICE_SECONDS = 0.0
    output = create(library)
    services.output_write(output_id=output.pk, token=output.token)
    Job.objects.filter(func=audio.TASK).delete()  # the worker died with the next slice
    StudioOutput.objects.filter(pk=output.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=settings.INGEST_STALE_SECONDS + 5)
    )
    fencing.reap_all()
    output.refresh_from_db()
    assert output.status == "pending"  # written again from the start
    services.output_write(output_id=output.pk, token=output.token)
    drain(output)
    output.refresh_from_db()
    assert output.status == "ready", output.error


def spoken(library) -> StudioOutput:
    output = create(library)
    services.output_write(output_id=output.pk, token=output.token)
    drain(output)
    output.refresh_from_db()
    assert output.status == "ready", output.error
    return output


def test_the_page_plays_the_overview_with_its_transcript_and_a_download(library, speech_server):
    output = spoken(library)
    bob = UserFactory.create()
    alice, stranger = Client(), Client()
    alice.force_login(library.alice)
    stranger.force_login(bob)
    page = alice.get(reverse("studio:output", args=[output.pk])).content.decode()
    audio_url = reverse("studio:audio", args=[output.pk])
    assert f'src="{audio_url}"' in page
    assert f'href="{audio_url}?download=1"' in page
    said = lines(output)
    assert page.count('data-testid="transcript-line"') == len(said)
    # Each line's time button seeks to where the file says it starts.
    for line in said[:3]:
        assert f'data-seek="{line["start"]}"' in page
    assert "cite-chip" in page  # the quotes' citations open the viewer
    assert output.content["audio"]["engine"] in page

    response = alice.get(audio_url)
    assert response.status_code == 200
    assert response["Content-Type"] == "audio/mpeg"
    data = response.getvalue()
    assert soundfile.info(io.BytesIO(data)).duration == pytest.approx(
        output.content["audio"]["seconds"], abs=0.2
    )
    saved = alice.get(audio_url + "?download=1")
    assert saved["Content-Disposition"].startswith("attachment")
    # Someone else's overview does not exist for them, page, file or API.
    assert stranger.get(audio_url).status_code == 404
    assert stranger.get(f"/api/studio/{output.pk}/audio").status_code == 404
    api = alice.get(f"/api/studio/{output.pk}")
    assert api.json()["audio_url"] == f"/api/studio/{output.pk}/audio"
    assert alice.get(f"/api/studio/{output.pk}/audio")["Content-Type"] == "audio/mpeg"


def test_an_overview_without_audio_yet_has_no_file(library, speech_server):
    speech_server.hang = 0.0
    output = create(library)  # queued, not spoken
    client = Client()
    client.force_login(library.alice)
    assert client.get(reverse("studio:audio", args=[output.pk])).status_code == 404
    assert client.get(f"/api/studio/{output.pk}").json()["audio_url"] is None
