"""Source profiles: requested after a source becomes ready (also when reused by hash) or is
reprocessed, built in the background (fenced by the profile's token, idempotent), edited by
the owner.

A run reads the pages' text, classifies (chat model when configured and the notebook owner's
model-call budget has room, else offline), extracts the type-specific JSON, names the source,
builds the canonical text and embeds it. It writes only while the row still carries its token;
a run of an older token changes nothing. An edited profile keeps its doc type, name and data: a
run refreshes the rest."""

from __future__ import annotations

import json
import logging
import time
from datetime import date, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone
from django.utils.translation import gettext

from attachments.models import DocumentPage, NoteAttachment
from core import model_budget
from core.embeddings import embedding_model_name, get_embedder
from core.fencing import FencedKind, queue_safely
from core.jobs import job_submit
from core.params import CONTROL_CHARACTERS_REFUSED, holds_control_characters
from intelligence import extraction
from intelligence.classifier import TYPES, classify
from intelligence.llm import llm_classify, llm_extract
from intelligence.models import SourceProfile

logger = logging.getLogger(__name__)
Status = SourceProfile.Status
TASK = "intelligence.tasks.build_profile"
TYPE_WORDS = {
    "invoice": "Invoice",
    "receipt": "Receipt",
    "flight_ticket": "Flight ticket",
    "order_confirmation": "Order confirmation",
    "other": "Other document",
}
# A ready profile's `error` when the budget kept the model out (shown beside "Analysed by").
BUDGET_SPENT = "Analysed offline: the notebook owner had used up their model calls."
BUDGET_SPENT_EXTRACTING = (
    "Data extracted offline: the notebook owner had used up their model calls."
)


def source_text(attachment: NoteAttachment) -> str:
    pages = DocumentPage.objects.filter(attachment=attachment).order_by("number")
    return "\n".join(pages.values_list("text", flat=True))


def canonical_text(*, better_name: str, doc_type: str, extracted: dict[str, Any]) -> str:
    """What the document-level vector is made of: the name, the type and the data."""
    data = json.dumps(extracted, ensure_ascii=False, sort_keys=True, default=str)
    return f"{better_name}\nType: {TYPE_WORDS.get(doc_type, doc_type)}\n{data}"


def _submit(profile_id: int, token: int) -> None:
    uploader = (
        SourceProfile.objects.filter(pk=profile_id)
        .values_list("attachment__uploaded_by_id", flat=True)
        .first()
    )
    job_submit(TASK, profile_id, token, user_id=uploader, group="profiles")


def _enqueue(profile_id: int, token: int) -> None:
    """Queue a run as the uploader's job (core.jobs: fair per user); one attempt, the
    reaper's requeue is the retry. Never fails its caller."""
    queue_safely(_submit, profile_id, token, what="a profile run")


def profile_request(*, attachment_id: int) -> SourceProfile | None:
    """Ask for a fresh profile of a ready attachment: bump the token, mark pending, queue a
    run on commit. Idempotent in effect: an older queued run is fenced off."""
    with transaction.atomic():
        attachment = NoteAttachment.objects.filter(
            pk=attachment_id, status=NoteAttachment.Status.READY
        ).first()
        if attachment is None:
            return None
        profile, _ = SourceProfile.objects.select_for_update().get_or_create(attachment=attachment)
        SourceProfile.objects.filter(pk=profile.pk).update(
            token=F("token") + 1,
            status=Status.PENDING,
            attempts=0,
            error="",
            heartbeat_at=timezone.now(),  # the reaper requeues it if its task is lost
        )
        profile.refresh_from_db()
        pk, token = profile.pk, profile.token
        _enqueue(pk, token)  # its ticket goes out on commit
    return profile


def profile_after_ready(*, attachment_id: int) -> None:
    """Hook from ingestion (a run or a reuse by hash ended ready); never fails its caller."""
    try:
        profile_request(attachment_id=attachment_id)
    except Exception:
        logger.exception("could not request the profile of attachment %s", attachment_id)


def profile_after_reprocess(*, attachment: NoteAttachment) -> None:
    """Hook from reprocess: a run of the old text is fenced off; the ready hook asks again."""
    try:
        SourceProfile.objects.filter(attachment=attachment).update(
            token=F("token") + 1, status=Status.PENDING, error=""
        )
    except Exception:
        logger.exception("could not mark the profile of attachment %s stale", attachment.pk)


def _analyse(text: str, fallback_name: str, *, owner_id: int) -> dict[str, Any]:
    """Classification, extraction and name, by chat model when it answers (each call spends
    one of the owner's model-call budget), else offline."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    method, model, note = "offline", "", ""
    asks = bool(settings.CHAT_MODEL and text.strip())
    if asks and not model_budget.spend(user_id=owner_id, feature="profile"):
        asks, note = False, BUDGET_SPENT
    llm = llm_classify(text) if asks else None
    if llm is not None:
        doc_type, confidence, name = llm
        method, model = "llm", settings.CHAT_MODEL
    else:
        result = classify(text)
        doc_type, confidence, name = result.doc_type, result.confidence, ""
    timings["classification"] = round(time.monotonic() - started, 3)
    started = time.monotonic()
    extracted = None
    if method == "llm":
        if model_budget.spend(user_id=owner_id, feature="profile"):
            extracted = llm_extract(doc_type, text)
        else:
            note = BUDGET_SPENT_EXTRACTING
    if extracted is None:
        extracted = extraction.extract(doc_type, text)
        if method == "llm":
            method = "llm+offline"  # classified by the model, extracted by pattern
    timings["extraction"] = round(time.monotonic() - started, 3)
    name = name or extraction.better_name(doc_type, extracted, fallback_name)
    return {
        "doc_type": doc_type,
        "confidence": confidence,
        "better_name": name,
        "extracted": extracted,
        "doc_date": extraction.document_date(doc_type, extracted),
        "method": method,
        "model": model,
        "timings": timings,
        "error": note,
    }


def _embed(text: str) -> tuple[list[float] | None, str]:
    try:
        embedder = get_embedder()
        return embedder.embed([text])[0], embedding_model_name()
    except Exception:
        logger.exception("could not embed a canonical text")
        return None, ""


def profile_build(*, profile_id: int, token: int) -> bool:
    """Build the profile if `token` is still current (claim PENDING → PROCESSING by a
    conditional update); write the result only under the same token. True when written."""
    claimed = SourceProfile.objects.filter(
        pk=profile_id, token=token, status__in=[Status.PENDING, Status.PROCESSING]
    ).update(status=Status.PROCESSING, attempts=F("attempts") + 1, heartbeat_at=timezone.now())
    if not claimed:
        logger.info("profile %s #%s superseded or gone", profile_id, token)
        return False
    profile = SourceProfile.objects.select_related("attachment__note__notebook").get(pk=profile_id)
    attachment = profile.attachment
    try:
        stem = attachment.original_name.rsplit(".", 1)[0]
        owner_id = attachment.note.notebook.owner_id
        result = _analyse(source_text(attachment), stem, owner_id=owner_id)
        if profile.edited:  # the owner's own type, name and data stay
            for field in ("doc_type", "better_name", "extracted", "doc_date", "confidence"):
                result[field] = getattr(profile, field)
            result["method"] = profile.method or result["method"]
        started = time.monotonic()
        canonical = canonical_text(
            better_name=result["better_name"],
            doc_type=result["doc_type"],
            extracted=result["extracted"],
        )
        vector, embedding_model = _embed(canonical)
        result["timings"]["embedding"] = round(time.monotonic() - started, 3)
        written = SourceProfile.objects.filter(pk=profile_id, token=token).update(
            **result,
            canonical_text=canonical,
            embedding=vector,
            embedding_model=embedding_model,
            status=Status.READY,
            ready_at=timezone.now(),
            updated_at=timezone.now(),
        )
    except Exception as exc:
        logger.exception("profile %s #%s failed", profile_id, token)
        SourceProfile.objects.filter(pk=profile_id, token=token).update(
            status=Status.FAILED, error=str(exc)[:500] or exc.__class__.__name__
        )
        raise
    return bool(written)


def _stuck(cutoff: datetime) -> QuerySet[SourceProfile]:
    """Profiles of ready sources whose run stopped without finishing, or whose task was lost
    (a pending profile's heartbeat is its request's time)."""
    return SourceProfile.objects.filter(
        status__in=[Status.PROCESSING, Status.PENDING],
        heartbeat_at__lt=cutoff,
        attachment__status=NoteAttachment.Status.READY,
    )


# The reaper's view of profiles (core.fencing; registered in IntelligenceConfig.ready()). A
# requeued run keeps its token: two runs of one token write the same result.
PROFILES = FencedKind(
    name="profiles",
    stale=_stuck,
    fail_error="Analysing the document stopped {attempts} times without finishing.",
    enqueue=lambda profile: _enqueue(profile.pk, profile.token),
    token_fenced=True,
)


def parse_extracted(raw: str) -> dict[str, Any]:
    """The owner's JSON: must parse and be an object."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ValidationError(
            gettext("The extracted data is not valid JSON: %(error)s") % {"error": exc},
            code="json",
        ) from exc
    if not isinstance(data, dict):
        raise ValidationError(
            gettext("The extracted data must be a JSON object ({…})."), code="json_object"
        )
    # Escaped ("\u0000") they pass the form's own check; PostgreSQL cannot store a NUL.
    if holds_control_characters(data):
        raise ValidationError(str(CONTROL_CHARACTERS_REFUSED), code="control_characters")
    return data


def profile_edit(
    *,
    profile: SourceProfile,
    doc_type: str | None = None,
    better_name: str | None = None,
    extracted: dict[str, Any] | None = None,
) -> SourceProfile:
    """The owner's corrections (validated, all or nothing); marks the profile edited so runs
    keep them, and re-embeds its canonical text. The caller has checked ownership."""
    if doc_type is not None and doc_type not in TYPES:
        raise ValidationError(gettext("Unknown document type."), code="doc_type")
    if better_name is not None and not better_name.strip():
        raise ValidationError(gettext("The name cannot be empty."), code="better_name")
    if better_name is not None and len(better_name) > 200:
        raise ValidationError(gettext("The name is too long."), code="better_name")
    if extracted is not None and not isinstance(extracted, dict):
        raise ValidationError(gettext("The extracted data must be a JSON object ({…})."))
    new_type = doc_type if doc_type is not None else profile.doc_type
    new_name = better_name.strip() if better_name is not None else profile.better_name
    new_data = extracted if extracted is not None else profile.extracted
    canonical = canonical_text(better_name=new_name, doc_type=new_type, extracted=new_data)
    vector, embedding_model = _embed(canonical)
    doc_date: date | None = extraction.document_date(new_type, new_data) or profile.doc_date
    with transaction.atomic():
        SourceProfile.objects.filter(pk=profile.pk).update(
            doc_type=new_type,
            better_name=new_name,
            extracted=new_data,
            doc_date=doc_date,
            edited=True,
            canonical_text=canonical,
            embedding=vector,
            embedding_model=embedding_model,
            updated_at=timezone.now(),
        )
    profile.refresh_from_db()
    return profile


def profile_name_accept(*, profile: SourceProfile, accepted: bool) -> SourceProfile:
    """The owner's explicit choice: download and show the source under its suggested file name
    (`accepted`), or under the name it was uploaded with again. A profile whose type was not
    recognised has no suggested name to accept. The caller has checked the role."""
    if accepted and not profile.recognised:
        raise ValidationError(
            gettext("This document's type was not recognised: there is no name to accept."),
            code="name_accepted",
        )
    SourceProfile.objects.filter(pk=profile.pk).update(
        name_accepted=accepted, updated_at=timezone.now()
    )
    profile.refresh_from_db()
    return profile
