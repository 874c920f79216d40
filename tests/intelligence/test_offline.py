"""The offline classifier's accuracy on the labelled set, and the extraction patterns."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from intelligence import patterns as p
from intelligence.classifier import classify
from intelligence.extraction import better_name, document_date, extract
from tests.intelligence.labelled import LABELLED

ACCURACY_FLOOR = 0.8


def test_offline_classifier_accuracy_on_the_labelled_set(capsys):
    misses = []
    for label, text in LABELLED:
        got = classify(text, use_embeddings=False)
        assert 0 <= got.confidence <= 1
        if got.doc_type != label:
            misses.append((label, got.doc_type, text.splitlines()[0]))
    accuracy = 1 - len(misses) / len(LABELLED)
    with capsys.disabled():
        print(f"\noffline classifier (keywords): {accuracy:.3f} on {len(LABELLED)} documents")
    assert len({label for label, _ in LABELLED}) == 5
    assert len(LABELLED) >= 25
    assert accuracy >= ACCURACY_FLOOR, misses


@pytest.mark.django_db
def test_offline_classifier_with_embeddings_keeps_its_accuracy(capsys):
    right = sum(classify(text).doc_type == label for label, text in LABELLED)
    accuracy = right / len(LABELLED)
    with capsys.disabled():
        print(f"\noffline classifier (keywords + embeddings): {accuracy:.3f}")
    assert accuracy >= ACCURACY_FLOOR


def test_unrelated_text_is_other_with_some_confidence():
    got = classify("The weather in Bergen was rainy all week.", use_embeddings=False)
    assert got.doc_type == "other"
    assert got.confidence > 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dato: 2026-03-12", date(2026, 3, 12)),
        ("Datum 05.02.2026", date(2026, 2, 5)),
        ("Date 07/01/2026", date(2026, 1, 7)),
        ("Issued 12 March 2026", date(2026, 3, 12)),
        ("March 9, 2026", date(2026, 3, 9)),
        ("12. mars 2026", date(2026, 3, 12)),
        ("3. Dezember 2025", date(2025, 12, 3)),
        ("1. desember 2025", date(2025, 12, 1)),
        ("10. März 2026", date(2026, 3, 10)),
        ("2026年3月5日", date(2026, 3, 5)),
    ],
)
def test_dates(text, expected):
    assert [d for _, d in p.find_dates(text)] == [expected]


@pytest.mark.parametrize(
    ("line", "amount", "currency"),
    [
        ("Totalt NOK 1 250,00", Decimal("1250.00"), "NOK"),
        ("Sum 71,00 kr", Decimal("71.00"), "NOK"),
        ("kr 49,90", Decimal("49.90"), "NOK"),
        ("Total €12.50", Decimal("12.50"), "EUR"),
        ("Gesamt 2.499,00 €", Decimal("2499.00"), "EUR"),
        ("Order total: $1,034.99", Decimal("1034.99"), "USD"),
        ("Amount due GBP 1,440.00", Decimal("1440.00"), "GBP"),
        ("£ 9.99", Decimal("9.99"), "GBP"),
    ],
)
def test_amounts_with_currencies(line, amount, currency):
    assert p.find_amounts(line)[-1] == (amount, currency)


def test_totals_prefer_the_total_over_subtotal_and_vat():
    text = "Subtotal 100,00\nMVA 25% 25,00\nÅ betale 125,00\n"
    assert p.find_total(text) == Decimal("125.00")
    assert p.find_total("Zwischensumme 10,00\nGesamt\n11,90 EUR") == Decimal("11.90")
    assert p.find_vat(text) == {"rate": 25.0, "amount": "25.00"}
    assert p.find_vat("MwSt 19% 399,00 €")["amount"] == "399.00"


def test_organisation_numbers_and_vat_ids():
    text = "Org.nr 912 345 678 MVA\nOrg. nr.: 987654321\nUSt-IdNr. DE123456789\nNO 923 456 789 MVA"
    assert p.find_org_numbers(text) == [
        "912345678 MVA",
        "987654321",
        "DE123456789",
        "NO923456789MVA",
    ]


def test_flight_numbers_and_iata_codes():
    text = "Flight SK 4035 Oslo (OSL) → Bergen (BGO)\nDY1302 TRD-OSL\nTotal NOK 1 200,00"
    assert p.find_flight_numbers(text) == ["SK4035", "DY1302"]
    assert p.find_airports(text) == [("OSL", "BGO"), ("TRD", "OSL")]
    assert p.find_airports("From: CPH\nTo: AMS") == [("CPH", "AMS")]
    # Currencies and VAT words are no airports; an org number is no flight.
    assert p.find_airports("NOK-EUR rate") == []
    assert p.find_flight_numbers("Org.nr 912 345 678") == []


def test_booking_references_and_order_numbers():
    assert p.first(p.BOOKING_REF, "Booking reference: X7K2QP") == "X7K2QP"
    assert p.first(p.BOOKING_REF, "Bestillingsreferanse HJ5KLM") == "HJ5KLM"
    assert p.first(p.ORDER_NUMBER, "Ordrenummer: 201188734") == "201188734"
    assert p.first(p.ORDER_NUMBER, "Bestellnummer 10203040506") == "10203040506"
    assert p.first(p.INVOICE_NUMBER, "Invoice no. INV-0042") == "INV-0042"


def test_receipt_extraction_and_name():
    label, text = LABELLED[0]
    data = extract(label, text)
    assert data["merchant"] == "REMA 1000 Majorstuen"
    assert data["date"] == "2026-03-12"
    assert data["total"] == "75.52"
    assert data["vat"] == {"rate": 15.0, "amount": "9.85"}
    assert data["currency"] == "NOK"
    assert data["payment_method"] == "Bankkort"
    assert data["organisation_numbers"] == ["987654321 MVA"]
    assert [i["description"] for i in data["items"]][:2] == ["Melk lett 1 l", "Brød grovt"]
    assert better_name(label, data, "scan") == "REMA 1000 Majorstuen receipt"
    assert document_date(label, data) == date(2026, 3, 12)


def test_invoice_extraction():
    data = extract("invoice", LABELLED[5][1])
    assert data["invoice_number"] == "2026-117"
    assert (data["issue_date"], data["due_date"]) == ("2026-03-01", "2026-03-15")
    assert data["customer"] == "Nordlys Design AS"
    assert data["total"] == "15625.00"
    assert data["vat"]["amount"] == "3125.00"


def test_flight_extraction():
    data = extract("flight_ticket", LABELLED[10][1])
    assert data["booking_reference"] == "X7K2QP"
    assert data["flights"][0] == {
        "flight_number": "SK4035",
        "from": "OSL",
        "to": "BGO",
        "departure": "2026-03-14T07:05",
        "arrival": "2026-03-14T07:55",
    }
    assert better_name("flight_ticket", data, "x") == "Flight ticket OSL–BGO (SK4035)"


def test_order_extraction():
    data = extract("order_confirmation", LABELLED[17][1])
    assert data["order_number"] == "10203040506"
    assert data["date"] == "2026-03-11"
    assert data["total"] == "89.95"
    assert data["currency"] == "EUR"
    assert "14.03.2026" in data["delivery"]
