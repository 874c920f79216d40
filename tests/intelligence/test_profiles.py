"""Source profiles end to end on a real small PDF: the task after ingestion (and after reuse
by hash and reprocess), fencing, the chat-model path against the fake server (and its
fallbacks), names, the split view, the edit form and the API."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from attachments.naming import display_name, suggested_name
from attachments.services import attachment_reprocess
from core.breakers import breaker
from core.llm import forget_servers
from intelligence import services
from intelligence.models import SourceProfile
from intelligence.services import profile_build, profile_request
from notes.services import note_create, notebook_create
from tests.fake_chat import Hang, Metadata, Refusal, Status, fake_chat_server
from tests.fixtures.documents import ingest, text_pdf, upload

pytestmark = pytest.mark.django_db

INVOICE = [
    "Fjordline Consulting AS",
    "Org.nr 912 345 678 MVA",
    "INVOICE",
    "Invoice number: 2026-117",
    "Invoice date: 01.03.2026",
    "Due date: 15.03.2026",
    "Bill to: Nordlys Design AS",
    "Consulting, 10 hours        12 500,00",
    "VAT 25%                      3 125,00",
    "Total NOK                   15 625,00",
    "Account number 1234.56.78901",
]


@pytest.fixture(scope="module")
def invoice_pdf() -> bytes:
    return text_pdf(INVOICE)  # once: each save gets a fresh /ID, so other bytes


@pytest.fixture
def invoice(alice, invoice_pdf):
    book = notebook_create(owner=alice, title="Papers")
    note = note_create(notebook=book, author=alice, title="Bills", body="")
    pdf = ingest(upload(alice, note, "scan_0042.pdf", invoice_pdf))
    assert pdf.status == "ready", pdf.error
    return pdf


def build(attachment) -> SourceProfile:
    profile = profile_request(attachment_id=attachment.pk)
    assert profile is not None
    assert profile_build(profile_id=profile.pk, token=profile.token)
    profile.refresh_from_db()
    return profile


@pytest.fixture
def fake(settings):
    forget_servers()
    with fake_chat_server() as server:
        settings.CHAT_MODEL = "fake-model"
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_API_KEY = "test-key"
        yield server
    forget_servers()


def test_ingestion_requests_a_profile_and_the_task_builds_it_offline(invoice, capsys):
    queued = SourceProfile.objects.get(attachment=invoice)  # the ready hook asked for it
    assert queued.status == "pending"
    assert queued.token == 1
    from intelligence.tasks import build_profile

    build_profile(queued.pk, queued.token)
    profile = SourceProfile.objects.get(pk=queued.pk)
    assert profile.status == "ready", profile.error
    assert profile.doc_type == "invoice"
    assert profile.method == "offline"
    assert profile.confidence > 0.5
    assert profile.better_name == "Invoice 2026-117 from Fjordline Consulting AS"
    assert profile.doc_date is not None
    assert profile.doc_date.isoformat() == "2026-03-01"
    data = profile.extracted
    assert data["total"] == "15625.00"
    assert data["currency"] == "NOK"
    assert data["due_date"] == "2026-03-15"
    assert data["vat"]["amount"] == "3125.00"
    assert data["organisation_numbers"] == ["912345678 MVA"]
    assert "Type: Invoice" in profile.canonical_text
    assert "15625.00" in profile.canonical_text
    assert profile.embedding is not None
    assert len(profile.embedding) > 0
    assert set(profile.timings) == {"classification", "extraction", "embedding"}
    with capsys.disabled():
        print(f"\nprofile timings (offline, one-page invoice PDF): {profile.timings}")
    short = invoice.uuid.hex[:8]
    invoice.refresh_from_db()
    assert suggested_name(invoice) == (f"Invoice-20260301-fjordline-consulting-as-{short}.pdf")
    assert display_name(invoice) == "scan_0042.pdf"  # until the owner accepts it


def test_a_run_of_an_old_token_writes_nothing_and_a_rerun_is_idempotent(invoice):
    first = profile_request(attachment_id=invoice.pk)
    second = profile_request(attachment_id=invoice.pk)
    assert first is not None
    assert second is not None
    assert second.token == first.token + 1
    assert not profile_build(profile_id=first.pk, token=first.token)
    assert SourceProfile.objects.get(pk=first.pk).status == "pending"
    assert profile_build(profile_id=second.pk, token=second.token)
    done = SourceProfile.objects.get(pk=first.pk)
    assert not profile_build(profile_id=second.pk, token=second.token)  # already ready
    again = build(invoice)
    assert (again.doc_type, again.better_name, again.extracted) == (
        done.doc_type,
        done.better_name,
        done.extracted,
    )


def test_reuse_by_hash_and_reprocess_ask_for_a_profile(invoice, alice, invoice_pdf):
    note = note_create(notebook=invoice.note.notebook, author=alice, title="Copy", body="")
    copy = ingest(upload(alice, note, "again.pdf", invoice_pdf))
    assert copy.status == "ready"
    assert "reuse" in copy.timings
    assert SourceProfile.objects.filter(attachment=copy, status="pending").exists()
    profile = build(invoice)
    attachment_reprocess(attachment=invoice)
    fenced = SourceProfile.objects.get(pk=profile.pk)
    assert fenced.token == profile.token + 1
    assert fenced.status == "pending"
    assert not profile_build(profile_id=profile.pk, token=profile.token)


def test_download_uses_the_suggested_name_once_accepted(invoice, alice_client):
    services.profile_name_accept(profile=build(invoice), accepted=True)
    response = alice_client.get(f"/attachments/{invoice.pk}/file/?download=1")
    assert response.status_code == 200
    assert "Invoice-20260301-fjordline-consulting-as-" in response["Content-Disposition"]


def test_an_edited_profile_keeps_the_owners_data_on_regeneration(invoice, alice_client):
    build(invoice)
    response = alice_client.post(
        f"/sources/{invoice.pk}/profile/",
        {
            "doc_type": "receipt",
            "better_name": "Fjordline consulting bill",
            "extracted": json.dumps({"total": "1", "note": "mine"}),
        },
    )
    assert response.status_code == 302
    profile = build(invoice)
    assert profile.edited
    assert (profile.doc_type, profile.better_name) == ("receipt", "Fjordline consulting bill")
    assert profile.extracted == {"total": "1", "note": "mine"}
    assert "Fjordline consulting bill" in profile.canonical_text


@pytest.mark.parametrize(
    ("extracted", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        # An escaped NUL passes the form's own check; PostgreSQL could not store it.
        ('{"note": "a\\u0000b"}', "control character"),
    ],
)
def test_the_edit_form_refuses_bad_json_and_writes_nothing(
    invoice, alice_client, extracted, message
):
    before = build(invoice)
    response = alice_client.post(
        f"/sources/{invoice.pk}/profile/",
        {"doc_type": "receipt", "better_name": "Changed", "extracted": extracted},
    )
    assert response.status_code == 400
    assert message in response.content.decode()
    after = SourceProfile.objects.get(pk=before.pk)
    assert (after.doc_type, after.better_name, after.edited) == (
        "invoice",
        before.better_name,
        False,
    )
    bad_type = alice_client.post(
        f"/sources/{invoice.pk}/profile/",
        {"doc_type": "spaceship", "better_name": "x", "extracted": "{}"},
    )
    assert bad_type.status_code == 400
    assert SourceProfile.objects.get(pk=before.pk).doc_type == "invoice"


def test_split_view_shows_the_data_inert_and_the_names(invoice, alice_client):
    profile = build(invoice)
    SourceProfile.objects.filter(pk=profile.pk).update(
        extracted={**profile.extracted, "vendor": "<script>alert(1)</script>"}
    )
    page = alice_client.get(f"/sources/{invoice.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "scan_0042.pdf" in page  # the original name is kept and shown
    assert display_name(invoice) in page
    assert 'data-testid="profile-timings"' in page
    assert "classification" in page
    row = alice_client.get(f"/attachments/{invoice.pk}/source/").content.decode()
    assert 'data-testid="source-profile"' in row
    assert f"/sources/{invoice.pk}/" in row


def test_profile_api_reads_and_patches(invoice, alice_api):
    build(invoice)
    got = alice_api.get(f"/api/attachments/{invoice.pk}/profile").json()
    assert got["doc_type"] == "invoice"
    assert got["original_name"] == "scan_0042.pdf"
    assert got["suggested_name"].startswith("Invoice-20260301-")
    assert got["display_name"] == "scan_0042.pdf"
    patched = alice_api.patch(
        f"/api/attachments/{invoice.pk}/profile",
        {"better_name": "Consulting invoice March"},
        content_type="application/json",
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["edited"]
    assert patched.json()["better_name"] == "Consulting invoice March"
    bad = alice_api.patch(
        f"/api/attachments/{invoice.pk}/profile",
        {"doc_type": "spaceship"},
        content_type="application/json",
    )
    assert bad.status_code in (400, 422)


def test_llm_path_classifies_names_and_extracts(invoice, fake):
    fake.script = [
        Metadata({"doc_type": "invoice", "confidence": 0.97, "better_name": "Fjordline invoice"}),
        Metadata({"invoice_number": "2026-117", "total": 15625, "currency": "NOK"}),
    ]
    profile = build(invoice)
    assert (profile.method, profile.model) == ("llm", "fake-model")
    assert (profile.doc_type, profile.confidence) == ("invoice", 0.97)
    assert profile.better_name == "Fjordline invoice"
    assert profile.extracted == {"invoice_number": "2026-117", "total": 15625, "currency": "NOK"}
    bodies = fake.unstreamed
    assert len(bodies) == 2
    assert all(body["temperature"] == 0 for body in bodies)
    assert "Allowed types" in bodies[0]["messages"][0]["content"]
    assert "invoice_number" in bodies[1]["messages"][0]["content"]


def test_llm_type_outside_the_allowed_set_is_other(invoice, fake):
    fake.script = [
        Metadata({"doc_type": "spaceship manual", "confidence": 0.9, "better_name": "A manual"}),
        Metadata({"title": "A manual"}),
    ]
    assert build(invoice).doc_type == "other"


@pytest.mark.parametrize(
    "turn",
    [Metadata("Sure! It is an invoice, I think."), Refusal(), Status(429), Hang(3)],
    ids=["junk", "refusal", "429", "timeout"],
)
def test_llm_failures_fall_back_to_offline(invoice, fake, settings, turn):
    settings.CHAT_TIMEOUT = 1
    fake.script = [turn] * 6  # every structured-output level
    profile = build(invoice)
    assert profile.status == "ready"
    assert profile.method == "offline"
    assert profile.doc_type == "invoice"
    assert profile.extracted["total"] == "15625.00"


def test_beyond_the_owners_model_call_budget_the_profile_is_made_offline_and_says_so(
    invoice, fake, settings, alice_client
):
    settings.MODEL_CALL_BUDGET = "3/h"
    fake.respond = lambda body: Metadata(
        {"doc_type": "invoice", "confidence": 0.9, "better_name": "Fjordline invoice"}
        if "Allowed types" in body["messages"][0]["content"]
        else {"invoice_number": "2026-117"}
    )
    assert build(invoice).method == "llm"  # two calls
    half = build(invoice)  # classified by the model; the extraction does not fit
    assert (half.method, half.error) == ("llm+offline", services.BUDGET_SPENT_EXTRACTING)
    offline = build(invoice)
    assert len(fake.unstreamed) == 3
    assert (offline.status, offline.method, offline.doc_type) == ("ready", "offline", "invoice")
    assert offline.error == services.BUDGET_SPENT
    assert (breaker("llm").state, breaker("llm").failures) == ("closed", 0)
    page = alice_client.get(f"/sources/{invoice.pk}/").content.decode()
    assert f'<span data-testid="profile-note">{services.BUDGET_SPENT}</span>' in page


def test_llm_extraction_junk_keeps_the_model_type_and_extracts_offline(invoice, fake):
    fake.script = [
        Metadata({"doc_type": "invoice", "confidence": 0.9, "better_name": "Fjordline invoice"}),
        *[Metadata("no json here")] * 3,
    ]
    profile = build(invoice)
    assert profile.method == "llm+offline"
    assert profile.extracted["invoice_number"] == "2026-117"


def test_display_name_falls_back_to_the_original_name(invoice):
    SourceProfile.objects.filter(attachment=invoice).delete()
    invoice.refresh_from_db()
    assert display_name(invoice) == "scan_0042.pdf"
    profile = SourceProfile.objects.create(
        attachment=invoice, status="ready", doc_type="flight_ticket", confidence=0.9,
        better_name="Flight ticket OSL–BGO (SK4035) ærøskøbing", doc_date=timezone.now().date(),
    )  # fmt: skip
    invoice.refresh_from_db()
    assert display_name(invoice) == "scan_0042.pdf"  # not accepted
    name = suggested_name(invoice)
    assert name.startswith(f"FlightTicket-{profile.doc_date:%Y%m%d}-osl-bgo-sk4035-")
    assert "aerosk" in name
    assert name.endswith(f"-{invoice.uuid.hex[:8]}.pdf")


def test_reaper_requeues_a_lost_run_and_fails_after_the_attempts(invoice, settings):
    from datetime import timedelta

    from core.fencing import reap, registered
    from intelligence.services import PROFILES

    # Reaped by the one reaper schedule, core's (tests/core/test_fencing.py).
    assert PROFILES in registered()
    profile = profile_request(attachment_id=invoice.pk)
    assert profile is not None
    assert reap(PROFILES) == 0  # fresh: its task is on its way
    old = timezone.now() - timedelta(seconds=settings.INGEST_STALE_SECONDS + 5)
    SourceProfile.objects.filter(pk=profile.pk).update(status="processing", heartbeat_at=old)
    assert reap(PROFILES) == 1
    assert SourceProfile.objects.get(pk=profile.pk).status == "pending"
    SourceProfile.objects.filter(pk=profile.pk).update(
        status="processing", heartbeat_at=old, attempts=settings.INGEST_MAX_ATTEMPTS
    )
    assert reap(PROFILES) == 1
    failed = SourceProfile.objects.get(pk=profile.pk)
    assert failed.status == "failed"
    assert "stopped" in failed.error
