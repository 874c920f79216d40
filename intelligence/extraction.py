"""Type-specific JSON from a document's text, offline (see patterns.py), and the better name."""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from intelligence import patterns as p

ITEM_SKIP = re.compile(
    r"total|totalt|sum|gesamt|mva|vat|mwst|moms|tax|å betale|subtotal|zwischensumme|change|"
    r"veksel|rückgeld|org|due|forfall|date|dato|datum|invoice|faktura|rechnung|order|ordre|"
    r"bestell|kort|card|visa|bank|iban|kid|konto|shipping|frakt|versand|delivery|levering",
    re.I,
)


# "From: Acme Ltd", "Seller: …", "Fra: …", "Von: …": the name after the label is the party's.
_PARTY_LABEL = re.compile(
    r"^\s*(?:from|seller|vendor|supplier|sold by|bill from|fra|selger|leverandør|von|"
    r"verkäufer|lieferant)\s*:\s*(?P<name>.+)$",
    re.I,
)
# What follows a name on its line and is not part of it: ", VAT number …", " Org.nr …".
_NAME_TAIL = re.compile(r"[,;]?\s*\b(?:vat|mva|org|ust|tax|tel|phone|e-?mail)\b.*$", re.I)


def _party(line: str) -> str:
    return _NAME_TAIL.sub("", line).strip(" ,;:-")


_TO_LINE = re.compile(r"^\s*(?:to|til|an)\s*:\s*(?P<name>.+)$", re.I | re.M)


def _customer(text: str) -> str | None:
    """Who an invoice is for: after "Bill to", "Customer", "Kunde"…, else a "To:" line."""
    found = p.first(p.CUSTOMER, text)
    if found:
        return _party(found) or found
    line = _TO_LINE.search(text)
    return _party(line.group("name")) or None if line else None


def _name_line(text: str) -> str | None:
    """The party a document is from: the name after a "From:"-like label, else the first
    line that reads like a name (letters, short, no amount or date); either without what
    follows the name on its line (VAT or organisation number, phone)."""
    lines = text.splitlines()
    for line in lines[:15]:
        labelled = _PARTY_LABEL.match(line)
        if labelled and _party(labelled.group("name")):
            return _party(labelled.group("name"))
    for line in lines[:8]:
        line = _party(line.strip())
        if (
            3 <= len(line) <= 60
            and re.search(r"[A-Za-zÀ-ÿ\u4e00-\u9fff]{2}", line)
            and not p.find_amounts(line)
            and not p.find_dates(line)
            and not re.search(
                r"receipt|kvittering|quittung|kassenbon|invoice|faktura|rechnung|order|"
                r"bestell|ordre|boarding|ticket|e-ticket|billett|收据|发票|订单",
                line,
                re.I,
            )
        ):
            return line
    return None


def _items(text: str) -> list[dict[str, Any]]:
    """Lines "description … amount" that are not totals, VAT, dates or labels."""
    items: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        amounts = p.find_amounts(line)
        if not amounts or ITEM_SKIP.search(line) or p.find_dates(line):
            continue
        description = p.AMOUNT.split(line)[0] if p.AMOUNT.search(line) else line
        description = re.sub(r"[\d.,\s×x*@-]+$", "", description).strip(" .:-\t")
        if not re.search(r"[A-Za-zÀ-ÿ\u4e00-\u9fff]{2}", description):
            continue
        qty = re.search(r"\b(\d{1,3})\s?(?:x|×|stk|pcs|stück)\b", line, re.I)
        item: dict[str, Any] = {"description": description[:120], "amount": str(amounts[-1][0])}
        if qty:
            item["quantity"] = int(qty.group(1))
        items.append(item)
    return items[:40]


def _iso(day: date | None) -> str | None:
    return day.isoformat() if day else None


def _money(value: Any) -> str | None:
    return str(value) if value is not None else None


def extract(doc_type: str, text: str) -> dict[str, Any]:
    """The offline extraction for `doc_type`: keys per the issue's lists, None when not found."""
    dates = [d for _, d in p.find_dates(text)]
    currency = p.main_currency(text)
    total = _money(p.find_total(text))
    vat = p.find_vat(text)
    if doc_type == "invoice":
        issue = p.dated_line(text, p.ISSUE_WORDS) or (dates[0] if dates else None)
        due = p.dated_line(text, p.DUE_WORDS)
        return {
            "invoice_number": p.first(p.INVOICE_NUMBER, text),
            "issue_date": _iso(issue),
            "due_date": _iso(due if due != issue else None),
            "vendor": _name_line(text),
            "customer": _customer(text),
            "line_items": _items(text),
            "total": total,
            "vat": vat,
            "currency": currency,
            "organisation_numbers": p.find_org_numbers(text),
        }
    if doc_type == "receipt":
        payment = p.PAYMENT.search(text)
        return {
            "merchant": _name_line(text),
            "date": _iso(dates[0] if dates else None),
            "items": _items(text),
            "total": total,
            "vat": vat,
            "currency": currency,
            "payment_method": payment.group(0).strip() if payment else None,
            "organisation_numbers": p.find_org_numbers(text),
        }
    if doc_type == "flight_ticket":
        numbers = p.find_flight_numbers(text)
        legs = p.find_airports(text)
        times = [f"{h.zfill(2)}:{m}" for h, m in p.TIME.findall(text)]
        flights = []
        for i in range(max(len(numbers), len(legs))):
            leg = legs[i] if i < len(legs) else (None, None)
            flights.append(
                {
                    "flight_number": numbers[i] if i < len(numbers) else None,
                    "from": leg[0],
                    "to": leg[1],
                    "departure": _when(dates, times, i, 0),
                    "arrival": _when(dates, times, i, 1),
                }
            )
        return {
            "passenger": p.first(p.PASSENGER, text),
            "booking_reference": p.first(p.BOOKING_REF, text),
            "flights": flights,
        }
    if doc_type == "order_confirmation":
        delivery = p.DELIVERY.search(text)
        return {
            "order_number": p.first(p.ORDER_NUMBER, text),
            "date": _iso(dates[0] if dates else None),
            "vendor": _name_line(text),
            "items": _items(text),
            "total": total,
            "currency": currency,
            "delivery": delivery.group(0).strip()[:200] if delivery else None,
        }
    return {"title": _name_line(text), "dates": [_iso(d) for d in dates[:5]]}


def _when(dates: list[date], times: list[str], leg: int, end: int) -> str | None:
    day = dates[min(leg, len(dates) - 1)] if dates else None
    index = 2 * leg + end
    clock = times[index] if index < len(times) else None
    if day and clock:
        return f"{day.isoformat()}T{clock}"
    return _iso(day) if end == 0 else clock


def document_date(doc_type: str, extracted: dict[str, Any]) -> date | None:
    """The document's own date from its extracted data."""
    raw = None
    if doc_type == "invoice":
        raw = extracted.get("issue_date")
    elif doc_type in ("receipt", "order_confirmation"):
        raw = extracted.get("date")
    elif doc_type == "flight_ticket":
        flights = extracted.get("flights") or [{}]
        raw = (flights[0] or {}).get("departure") if isinstance(flights[0], dict) else None
    elif doc_type == "other":
        raw = (extracted.get("dates") or [None])[0]
    if not isinstance(raw, str):
        return None
    try:
        return date.fromisoformat(raw[:10])
    except ValueError:
        return None


def better_name(doc_type: str, extracted: dict[str, Any], fallback: str) -> str:
    """A short English name a person would give the file: "Rema 1000 receipt",
    "Invoice 2026-117 from Acme AS", "Flight ticket OSL–BGO (SK4035)", "Order 55120 from …"."""

    def clean(value: Any) -> str:
        return re.sub(r"\s+", " ", str(value)).strip()[:80] if value else ""

    if doc_type == "receipt":
        merchant = clean(extracted.get("merchant"))
        name = f"{merchant} receipt" if merchant else "Receipt"
    elif doc_type == "invoice":
        number, vendor = clean(extracted.get("invoice_number")), clean(extracted.get("vendor"))
        name = "Invoice" + (f" {number}" if number else "") + (f" from {vendor}" if vendor else "")
    elif doc_type == "flight_ticket":
        flights = [f for f in extracted.get("flights") or [] if isinstance(f, dict)]
        route = (
            f" {flights[0].get('from')}–{flights[-1].get('to')}"
            if flights and flights[0].get("from") and flights[-1].get("to")
            else ""
        )
        number = clean(flights[0].get("flight_number")) if flights else ""
        name = f"Flight ticket{route}" + (f" ({number})" if number else "")
    elif doc_type == "order_confirmation":
        number, vendor = clean(extracted.get("order_number")), clean(extracted.get("vendor"))
        name = "Order confirmation" + (f" {number}" if number else "")
        name += f" from {vendor}" if vendor else ""
    else:
        name = clean(extracted.get("title")) or fallback
    return name[:200]
