"""A profile is shown only when its type was recognised with confidence (or the owner set it):
the source row, the split view, the search page's badges and type filters; downloads keep the
user's file name until they accept the suggested one. Real small PDFs, real ingestion."""

from __future__ import annotations

import json
import re

import pytest

from attachments.naming import display_name, suggested_name
from intelligence.classifier import classify
from intelligence.models import SourceProfile
from intelligence.services import profile_build, profile_request
from notes.services import membership_add, note_create, notebook_create
from tests.fixtures.documents import ingest, text_pdf, upload

pytestmark = pytest.mark.django_db

INVOICE = [
    "Fjordline Consulting AS",
    "INVOICE",
    "Invoice number: 2026-117",
    "Invoice date: 01.03.2026",
    "Due date: 15.03.2026",
    "Bill to: Nordlys Design AS",
    "Total NOK                   15 625,00",
    "Account number 1234.56.78901",
]


def source(user, notebook, name: str, lines: list[str]):
    note = note_create(notebook=notebook, author=user, title=name, body="")
    attachment = ingest(upload(user, note, name, text_pdf(lines)))
    assert attachment.status == "ready", attachment.error
    return attachment


def profiled(attachment, doc_type: str, confidence: float, **fields):
    """The attachment's profile as a finished run leaves it, with this type and confidence."""
    SourceProfile.objects.update_or_create(
        attachment=attachment,
        defaults={
            "doc_type": doc_type,
            "confidence": confidence,
            "better_name": f"Suggested {doc_type} name",
            "extracted": {"vendor": "Suggested Vendor AS", "total": "99.00"},
            "status": "ready",
            "method": "offline",
            **fields,
        },
    )
    attachment.refresh_from_db()
    return attachment


@pytest.fixture
def book(alice):
    return notebook_create(owner=alice, title="Papers")


@pytest.fixture
def invoice(alice, book):
    attachment = source(alice, book, "scan_0042.pdf", INVOICE)
    profile = profile_request(attachment_id=attachment.pk)
    assert profile is not None
    assert profile_build(profile_id=profile.pk, token=profile.token)
    attachment.refresh_from_db()
    assert attachment.profile.recognised  # a clear invoice, offline
    return attachment


def test_a_close_call_between_two_types_has_a_low_confidence():
    clear = classify("\n".join(INVOICE), use_embeddings=False)
    close = classify("Invoice / receipt\nTotal 12.00", use_embeddings=False)
    assert clear.doc_type == "invoice"
    assert clear.confidence >= 0.7
    assert close.doc_type in ("invoice", "receipt")
    assert close.confidence < 0.7  # the default PROFILE_MIN_CONFIDENCE


@pytest.mark.parametrize(
    ("doc_type", "confidence", "edited", "shown"),
    [
        ("invoice", 0.9, False, True),
        ("invoice", 0.55, False, False),  # below the threshold
        ("other", 0.95, False, False),  # Other says nothing
        ("receipt", 0.1, True, True),  # the owner's own correction always shows
    ],
    ids=["confident", "unsure", "other", "corrected"],
)
def test_the_source_row_and_split_view_show_a_profile_only_when_recognised(
    alice, book, alice_client, doc_type, confidence, edited, shown
):
    attachment = profiled(
        source(alice, book, "scan.pdf", ["Some text"]), doc_type, confidence, edited=edited
    )
    row = alice_client.get(f"/attachments/{attachment.pk}/source/").content.decode()
    split = alice_client.get(f"/sources/{attachment.pk}/").content.decode()
    for page in (row, split):
        assert ('data-testid="doc-type"' in page) is shown
        assert (f"Suggested {doc_type} name" in page) is shown
    assert ("Suggested Vendor AS" in split) is shown  # the extracted data
    assert (suggested_name(attachment) != "") is shown
    if not shown:
        assert 'data-testid="not-recognised"' in split
        assert 'data-testid="source-details"' in row  # the way to correct it stays


def test_the_threshold_is_a_setting(alice, book, alice_client, settings):
    attachment = profiled(source(alice, book, "scan.pdf", ["Some text"]), "invoice", 0.6)
    assert not attachment.profile.recognised
    settings.PROFILE_MIN_CONFIDENCE = 0.5
    row = alice_client.get(f"/attachments/{attachment.pk}/source/").content.decode()
    assert 'data-testid="doc-type"' in row


def _filename(response) -> str:
    assert response.status_code == 200
    return str(response["Content-Disposition"])


def test_downloads_keep_the_users_file_name_until_the_suggested_one_is_accepted(
    invoice, alice_client, alice_api
):
    page = f"/attachments/{invoice.pk}/file/?download=1"
    api = f"/api/attachments/{invoice.pk}/file"
    suggested = suggested_name(invoice)
    assert suggested.startswith("Invoice-20260301-fjordline-consulting-as-")
    assert display_name(invoice) == "scan_0042.pdf"
    assert "scan_0042.pdf" in _filename(alice_client.get(page))
    assert "scan_0042.pdf" in _filename(alice_api.get(api))
    split = alice_client.get(f"/sources/{invoice.pk}/").content.decode()
    assert 'data-testid="name-accept"' in split
    assert suggested in split

    accepted = alice_client.post(f"/sources/{invoice.pk}/name/", {"accept": "1"})
    assert accepted.status_code == 302
    assert suggested in _filename(alice_client.get(page))
    assert suggested in _filename(alice_api.get(api))
    assert (
        'data-testid="name-revert"' in alice_client.get(f"/sources/{invoice.pk}/").content.decode()
    )

    reverted = alice_client.post(f"/sources/{invoice.pk}/name/", {"accept": "0"})
    assert reverted.status_code == 302
    assert "scan_0042.pdf" in _filename(alice_client.get(page))


def test_editors_get_the_name_and_profile_forms_and_viewers_neither(invoice, book, alice, bob):
    from django.test import Client

    from tests.factories import UserFactory

    carol = UserFactory.create(username="carol")
    membership_add(notebook=book, by=alice, identifier="bob", role="editor")
    membership_add(notebook=book, by=alice, identifier="carol", role="viewer")
    pages = {}
    for user in (bob, carol):
        client = Client()
        client.force_login(user)
        pages[user.username] = client.get(f"/sources/{invoice.pk}/").content.decode()
        accepted = client.post(f"/sources/{invoice.pk}/name/", {"accept": "1"})
        assert accepted.status_code == (302 if user is bob else 403)
    assert (
        'data-testid="name-revert"' in pages["bob"] or 'data-testid="name-accept"' in pages["bob"]
    )
    assert 'data-testid="profile-form"' in pages["bob"]
    assert 'data-testid="name-form"' not in pages["carol"]
    assert 'data-testid="profile-form"' not in pages["carol"]


def test_editing_the_profile_does_not_accept_the_name(invoice, alice_client):
    response = alice_client.post(
        f"/sources/{invoice.pk}/profile/",
        {"doc_type": "invoice", "better_name": "My invoice", "extracted": json.dumps({})},
    )
    assert response.status_code == 302
    download = alice_client.get(f"/attachments/{invoice.pk}/file/?download=1")
    assert "scan_0042.pdf" in _filename(download)


def test_an_unrecognised_name_cannot_be_accepted_and_bad_input_is_a_400(alice, book, alice_client):
    attachment = profiled(source(alice, book, "scan.pdf", ["Some text"]), "invoice", 0.4)
    refused = alice_client.post(f"/sources/{attachment.pk}/name/", {"accept": "1"})
    assert refused.status_code == 400
    assert "not recognised" in refused.content.decode()
    assert not SourceProfile.objects.get(attachment=attachment).name_accepted
    assert alice_client.post(f"/sources/{attachment.pk}/name/", {"accept": "x"}).status_code == 400
    assert alice_client.post(f"/sources/{attachment.pk}/name/", {}).status_code == 400


def test_another_user_cannot_accept_the_name(invoice, bob):
    from django.test import Client

    client = Client()
    client.force_login(bob)
    assert client.post(f"/sources/{invoice.pk}/name/", {"accept": "1"}).status_code == 404
    assert not SourceProfile.objects.get(attachment=invoice).name_accepted


def test_the_api_accepts_the_name_and_says_whether_the_type_was_recognised(invoice, alice_api):
    got = alice_api.get(f"/api/attachments/{invoice.pk}/profile").json()
    assert (got["recognised"], got["name_accepted"]) == (True, False)
    assert got["display_name"] == "scan_0042.pdf"
    assert got["suggested_name"].startswith("Invoice-20260301-")
    patched = alice_api.patch(
        f"/api/attachments/{invoice.pk}/profile",
        {"name_accepted": True},
        content_type="application/json",
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["display_name"] == got["suggested_name"]
    assert not patched.json()["edited"]  # accepting a name is no correction


def _type_options(page: str) -> set[str]:
    select = re.search(r'<select name="type".*?</select>', page, re.S)
    if select is None:
        return set()
    return set(re.findall(r'<option value="(\w+)"', select.group(0)))


def test_the_search_page_offers_only_the_types_the_user_has(alice, bob, book, alice_client):
    unsure = profiled(source(alice, book, "a.pdf", ["Some text"]), "invoice", 0.5)
    assert _type_options(alice_client.get("/search/").content.decode()) == set()
    profiled(source(alice, book, "b.pdf", ["Other text"]), "invoice", 0.9)
    # Bob's confident receipt counts for nothing on Alice's page.
    bobs_book = notebook_create(owner=bob, title="Bob's")
    profiled(source(bob, bobs_book, "r.pdf", ["Bob's text"]), "receipt", 0.95)
    page = alice_client.get("/search/").content.decode()
    assert _type_options(page) == {"invoice", "other"}  # `unsure` is one of the others
    assert _type_options(alice_client.get(f"/notebooks/{book.pk}/search/").content.decode()) == {
        "invoice",
        "other",
    }
    # Shared with her, his notebook's documents count for her.
    membership_add(notebook=bobs_book, by=bob, identifier="alice")
    assert _type_options(alice_client.get("/search/").content.decode()) == {
        "invoice",
        "receipt",
        "other",
    }
    assert unsure.profile.doc_type == "invoice"


def test_a_type_filter_matches_only_recognised_documents(alice, book, alice_api):
    sure = profiled(source(alice, book, "sure.pdf", ["Harbour crane rental"]), "invoice", 0.9)
    unsure = profiled(source(alice, book, "unsure.pdf", ["Harbour crane repair"]), "invoice", 0.5)

    def found(doc_type: str) -> set[int]:
        body = alice_api.get(
            "/api/search", {"q": "harbour crane", "mode": "lexical", "doc_type": doc_type}
        ).json()
        return {hit["attachment_id"] for hit in body["hits"]}

    assert found("invoice") == {sure.pk}
    assert found("other") == {unsure.pk}
