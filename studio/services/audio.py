"""The audio overview: a transcript, then its speech, spoken in slices.

The transcript is made from the briefing (studio.services.building.quoted_briefing: verified quotes
of the sources, by section). Offline it is the briefing narrated: a host (the first voice)
names each section in a short translated frame, a reader (the second voice) reads its quotes.
With a chat model, two hosts talk the statements over: the model writes the lines, each line
that claims something must cite the statements it comes from and is judged against them
(chat.claims, as a chat answer's sentences are); a line no statement backs, or that claims
something without citing, is left out; too few lines left and the narration is used instead.

Speech (core.speech: a speech server, or Piper locally) is slow work: minutes for a long
overview. So it runs in slices of about STUDIO_SPEECH_SLICE_SECONDS, each its own fair job
(core.jobs): a slice speaks the next lines into a WAV part, saves how far it got in the row
and queues the next slice behind whatever other users have queued meanwhile. The last slice
joins the parts into one MP3 (`StudioOutput.audio`), notes each line's start and end for the
player and ends the output ready. Every write is fenced by the output's token
(studio.services.runs): a cancel, a regenerate or a delete stops the next slice, and the parts
of a run that stopped are removed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from pydantic import BaseModel, Field

from chat.claims import judge
from core import llm, model_budget, speech
from core.jobs import job_submit
from grounding.citations import MARKER
from studio.models import StudioOutput
from studio.services import drafting
from studio.services.building import Citations, Material, quoted_briefing
from studio.services.runs import Run, Superseded

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from studio.services.building import Beat

logger = logging.getLogger(__name__)
Status = StudioOutput.Status
TASK = "studio.tasks.speak_output"
PAUSE = 0.4  # seconds of silence after a line
SECTION_PAUSE = 0.9  # before a section's first line
MAX_LINES = 60
MIN_DIALOGUE_LINES = 4  # cited lines a model's conversation must keep, else the narration
SPEECH_RETRIES = 3
PARTS = "studio/parts/"
HOST, OTHER = 0, 1


# --- The transcript -----------------------------------------------------------------------


def script(material: Material, beat: Beat) -> dict[str, Any]:
    """The overview's content: the transcript (one section of lines: speaker, text with its
    [n] markers, `cited` False for a frame) and the briefing's citations."""

    def briefed(stage: str, percent: int) -> None:  # the briefing is the first 30 %
        beat(stage, percent * 30 // 100)

    told = quoted_briefing(material, briefed)
    cites = Citations()
    for citation in told["citations"]:
        cites.cite(citation, str(citation.get("quote", "")))
    lines = None
    if settings.CHAT_MODEL and model_budget.spend(user_id=material.user.pk, feature="studio"):
        lines = conversation(told, material)
        if lines:
            material.answered_by.add("llm")
    beat("script", 35)
    if not lines:
        lines = narration(told, material)
    content = cites.finish([{"heading": _("Transcript"), "items": lines[:MAX_LINES]}])
    if not any(line.get("cited", True) for line in lines_of(content)):
        content["sections"] = []  # nothing quoted: nothing to speak (the output fails)
    content["audio"] = {"engine": speech.engine(), "spoken": 0, "parts": [], "seconds": 0.0}
    return content


def narration(told: dict[str, Any], material: Material) -> list[dict[str, Any]]:
    """The briefing read out: a frame, then each section's name (host) and its quotes
    (reader); the key topics named by the host."""
    n = len(material.files)
    lines = [_frame(_("An audio overview of “%(title)s”, read from %(n)s sources. Every quote "
                      "in it is linked to its page in the transcript.")
                    % {"title": material.title, "n": n})]  # fmt: skip
    for section in told["sections"]:
        items = section.get("items") or []
        cited = [i for i in items if i.get("cited", True)]
        if cited:
            lines.append({**_frame(str(section.get("heading", ""))), "section": True})
            lines += [{"speaker": OTHER, "text": str(i.get("text", ""))} for i in cited]
        elif items:
            topics = ", ".join(str(i.get("text", "")) for i in items)
            lines.append(
                {**_frame(_("Key topics: %(topics)s.") % {"topics": topics}), "section": True}
            )
    lines.append(_frame(_("That is the end of this overview.")))
    return lines


def _frame(text: str) -> dict[str, Any]:
    return {"speaker": HOST, "text": text, "cited": False}


class _Line(BaseModel):
    speaker: str = Field(max_length=8)
    text: str = Field(max_length=1000)


class _Dialogue(BaseModel):
    lines: list[_Line] = Field(max_length=80)


def conversation(told: dict[str, Any], material: Material) -> list[dict[str, Any]] | None:
    """Two hosts talking the briefing's statements over, written by the chat model: only the
    lines that cite statements backing them (chat.claims.judge), or that claim nothing (a
    question, a reaction); None when the model fails or too few lines are left."""
    statements = drafting.statements(told)
    if not statements:
        return None
    listed = drafting.listed(statements)
    language = drafting.language()
    system = (
        "You write the script of a short podcast in which two hosts, A and B, talk about "
        "numbered statements quoted from the listener's sources. Use only what the statements "
        "say and add no fact of your own. End every line that states something from them with "
        "the numbers of the statements it comes from, like [2] or [1][3]. A line may also ask "
        "a question or react briefly, without numbers. A and B take turns; 10 to 30 lines; "
        f"write in {language}. Answer with JSON: "
        '{"lines": [{"speaker": "A", "text": "..."}]}'
    )
    reply = llm.structured_call(
        name="studio audio", system=system, user=f"Statements:\n{listed}", model=_Dialogue,
        max_tokens=2000, timeout=float(settings.CHAT_TIMEOUT),
    )  # fmt: skip
    if reply is None:
        return None
    sources = drafting.sources(statements)
    known = set(statements)
    lines: list[dict[str, Any]] = []
    for line in reply.lines:
        text = " ".join(line.text.split())
        cited = {int(n) for n in MARKER.findall(text)}
        if not text or not cited <= known:
            continue
        claims = judge(text, sources)
        if any(c.judged and (not c.backed or not c.cites) for c in claims):
            continue  # claims something no statement backs, or without saying which
        speaker = OTHER if line.speaker.strip().upper().startswith("B") else HOST
        lines.append({"speaker": speaker, "text": text, **({} if cited else {"cited": False})})
    if sum(1 for line in lines if line.get("cited", True)) < MIN_DIALOGUE_LINES:
        return None
    return lines


# --- Speech, in slices ----------------------------------------------------------------------


def lines_of(content: dict[str, Any]) -> list[dict[str, Any]]:
    sections = content.get("sections") or []
    return list(sections[0].get("items") or []) if sections else []


def speak(output: StudioOutput, run: Run) -> None:
    """Speak the next lines for about STUDIO_SPEECH_SLICE_SECONDS, then finish the output or
    queue the next slice. Raises Superseded when the row is no longer this run's,
    speech.SpeechError and speech.SpeechUnavailable for the caller to fail the output with."""
    content = dict(output.content)
    state = dict(content.get("audio") or {})
    lines = lines_of(content)
    start = int(state.get("spoken", 0))
    began = time.monotonic()
    pieces: list[NDArray[np.float32]] = []
    rate = int(state.get("rate") or 0)
    done = start
    wait = 0.0  # before the next slice: a server that failed asks for a pause
    for i in range(start, len(lines)):
        line = lines[i]
        try:
            spoken = drafting.unmarked(str(line.get("text", "")))
            said = speech.speak(spoken, voice=int(line["speaker"]))
        except speech.SpeechError as exc:
            if not exc.retryable or int(state.get("retries", 0)) >= SPEECH_RETRIES:
                raise
            state["retries"] = int(state.get("retries", 0)) + 1
            wait = min(300.0, exc.retry_after or 5.0 * 2 ** state["retries"])
            logger.warning("studio output %s: speech failed (%s); again in %ss",
                           output.pk, exc.message, wait)  # fmt: skip
            break
        rate = rate or said.rate
        samples = speech.resample(said.samples, said.rate, rate)
        before = SECTION_PAUSE if line.get("section") and i else 0.0
        pieces += [speech.silence(before, rate), samples, speech.silence(PAUSE, rate)]
        at = float(state.get("seconds", 0.0)) + sum(len(p) for p in pieces[:-2]) / rate
        lines[i] = {**line, "start": round(at, 2), "end": round(at + said.seconds, 2)}
        done = i + 1
        run.beat("speech", 35 + 60 * done // max(1, len(lines)))
        if time.monotonic() - began >= float(settings.STUDIO_SPEECH_SLICE_SECONDS):
            break
    if pieces:
        part = _save_part(output, len(state.get("parts") or []), np.concatenate(pieces), rate)
        state["parts"] = [*(state.get("parts") or []), part]
        state["seconds"] = round(float(state.get("seconds", 0.0)) + sum(map(len, pieces)) / rate, 2)
    state.update(spoken=done, rate=rate)
    content["sections"] = [{**content["sections"][0], "items": lines}]
    content["audio"] = state
    if done < len(lines):
        run.save(content=content)
        _queue_next(output, wait)
        return
    _finish(output, run, content)


def _save_part(output: StudioOutput, k: int, samples: NDArray[np.float32], rate: int) -> str:
    import soundfile  # libsndfile: only in the worker that speaks

    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype="PCM_16")
    name = f"{PARTS}{output.pk}-{output.token}-{k}.wav"
    default_storage.delete(name)  # a slice run again writes its part again
    return default_storage.save(name, ContentFile(buffer.getvalue()))


def _queue_next(output: StudioOutput, wait: float) -> None:
    due = timezone.now() + timedelta(seconds=wait) if wait > 0 else None
    pk, token = output.pk, output.token
    with transaction.atomic():
        job_submit(TASK, pk, token, user_id=output.created_by_id, group="studio", not_before=due)


def _finish(output: StudioOutput, run: Run, content: dict[str, Any]) -> None:
    """Join the parts into the MP3 and end the output ready (the MP3 is removed again if the
    run lost the row meanwhile)."""
    import soundfile  # see _save_part

    state = content["audio"]
    parts = list(state.pop("parts", []))
    joined = [soundfile.read(default_storage.open(p), dtype="float32")[0] for p in parts]
    samples = np.concatenate(joined) if joined else np.zeros(1, dtype=np.float32)
    run.beat("encoding", 97)
    data = speech.encode_mp3(samples, int(state.get("rate") or 22050))
    name = default_storage.save(f"studio/audio/{output.pk}-{output.token}.mp3", ContentFile(data))
    state.update(seconds=round(len(samples) / int(state.get("rate") or 22050), 2),
                 bytes=len(data), format="mp3")  # fmt: skip
    old = StudioOutput.objects.filter(pk=output.pk).values_list("audio", flat=True).first()
    try:
        written = StudioOutput.Generator.LLM if output.model else StudioOutput.Generator.OFFLINE
        run.end(status=Status.READY, content=content, audio=name, progress=100, stage="",
                error="", ready_at=timezone.now(), generator=written)  # fmt: skip
    except Superseded:
        default_storage.delete(name)
        raise
    finally:
        for part in parts:
            default_storage.delete(part)
    if old and old != name:
        default_storage.delete(old)


def remove_parts(output_id: int, token: int | None = None) -> None:
    """The WAV parts of an output's runs (of one token, or all), e.g. once it stopped."""
    try:
        _dirs, files = default_storage.listdir(PARTS)
    except (FileNotFoundError, NotADirectoryError):
        return
    prefix = f"{output_id}-" if token is None else f"{output_id}-{token}-"
    for name in files:
        if name.startswith(prefix):
            default_storage.delete(PARTS + name)


def output_speak(*, output_id: int, token: int) -> None:
    """The next slice of an output's speech (studio.tasks.speak_output), if `token` is still
    its current one and it is being written."""
    output = (
        StudioOutput.objects.filter(pk=output_id, token=token, status=Status.PROCESSING)
        .select_related("notebook", "created_by")
        .first()
    )
    if output is None:
        logger.info("studio output %s run %s: stopped; no more speech", output_id, token)
        remove_parts(output_id, token)
        return
    run = Run(output, carry_on=True)
    with translation.override(output.language or settings.LANGUAGE_CODE):
        guarded(output, run, lambda: speak(output, run))


def guarded(output: StudioOutput, run: Run, work: Any) -> None:
    """Run a step of the speech, failing the output with a message the user can act on."""
    try:
        work()
    except Superseded:
        logger.info("studio output %s run %s was superseded; stopping", output.pk, run.token)
        remove_parts(output.pk, run.token)
    except speech.SpeechUnavailable as exc:
        _fail(output, run, str(exc))
    except speech.SpeechError as exc:
        _fail(output, run, exc.message)


def _fail(output: StudioOutput, run: Run, error: str) -> None:
    with contextlib.suppress(Superseded):
        run.end(status=Status.FAILED, error=error, stage="")
    remove_parts(output.pk, run.token)


def remove_audio_when_deleted(sender: Any, instance: StudioOutput, **kwargs: Any) -> None:
    """post_delete of StudioOutput (its own delete, its notebook's, the admin): its MP3 and any
    parts go once the deletion commits (a rollback keeps the row, and so the files)."""
    name, pk = instance.audio.name, instance.pk

    def remove() -> None:
        if name:
            default_storage.delete(name)
        remove_parts(pk)

    transaction.on_commit(remove, using=kwargs.get("using"))
