"""Offline extraction: dates, amounts with currencies, totals, VAT, organisation numbers, flight
numbers, IATA codes, booking references and order/invoice numbers, by pattern, in English,
German, Norwegian (and a little Chinese). Each function reads plain text and returns plain
values; `extract` assembles the type-specific JSON from them."""

from __future__ import annotations

import re
from collections import Counter
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

MONTHS = {
    # English, Norwegian, German; full names and the usual abbreviations.
    **dict.fromkeys(["january", "jan", "januar", "jänner"], 1),
    **dict.fromkeys(["february", "feb", "februar"], 2),
    **dict.fromkeys(["march", "mar", "mars", "märz", "maerz", "mär"], 3),
    **dict.fromkeys(["april", "apr"], 4),
    **dict.fromkeys(["may", "mai"], 5),
    **dict.fromkeys(["june", "jun", "juni"], 6),
    **dict.fromkeys(["july", "jul", "juli"], 7),
    **dict.fromkeys(["august", "aug"], 8),
    **dict.fromkeys(["september", "sep", "sept"], 9),
    **dict.fromkeys(["october", "oct", "oktober", "okt"], 10),
    **dict.fromkeys(["november", "nov"], 11),
    **dict.fromkeys(["december", "dec", "desember", "dezember", "des", "dez"], 12),
}
_MONTH = "|".join(sorted((re.escape(m) for m in MONTHS), key=len, reverse=True))
DATE_PATTERNS = [
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), ("y", "m", "d")),
    (re.compile(r"\b(\d{1,2})[./](\d{1,2})[./](\d{4})\b"), ("d", "m", "y")),
    (re.compile(r"\b(\d{1,2})\.(\d{1,2})\.(\d{2})\b"), ("d", "m", "yy")),
    (re.compile(rf"\b(\d{{1,2}})\.?\s+({_MONTH})\.?,?\s+(\d{{4}})\b", re.I), ("d", "M", "y")),
    (re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}}),?\s+(\d{{4}})\b", re.I), ("M", "d", "y")),
    (re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*日"), ("y", "m", "d")),
]

# A currency before or after a number: "NOK 1 250,00", "kr 49,90", "€12.50", "12,50 €".
CURRENCIES = {
    "nok": "NOK", "kr": "NOK", "kr.": "NOK", ",-": "NOK", "eur": "EUR", "€": "EUR",
    "usd": "USD", "$": "USD", "us$": "USD", "gbp": "GBP", "£": "GBP", "sek": "SEK",
    "dkk": "DKK", "chf": "CHF", "cny": "CNY", "rmb": "CNY", "¥": "CNY", "元": "CNY",
}  # fmt: skip
_CUR = r"NOK|EUR|USD|GBP|SEK|DKK|CHF|CNY|RMB|US\$|kr\.?|€|\$|£|¥"
_NUM = r"\d{1,3}(?:[ .,\u00a0]\d{3})*(?:[.,]\d{1,2})?|\d+(?:[.,]\d{1,2})?"
AMOUNT = re.compile(
    rf"(?:(?P<pre>{_CUR})\s?(?P<a>{_NUM}))|(?:(?P<b>{_NUM})\s?(?P<post>{_CUR}|元|,-))",
    re.I,
)
BARE_AMOUNT = re.compile(rf"(?<![\d.,])(?P<n>{_NUM})\s*$")

TOTAL_WORDS = re.compile(
    r"\b(total|totalt|sum|gesamt\w*|å betale|a betale|amount due|grand total|balance due|"
    r"endbetrag|zu zahlen|beløp|total amount)\b|合计|总计|总额",
    re.I,
)
NOT_TOTAL = re.compile(r"sub|netto|eks\.?|excl|zwischen|mva|vat|mwst|ust|moms|tax", re.I)
VAT_WORDS = re.compile(r"\b(mva|vat|mwst|ust|moms|tax|sales tax)\b|增值税|税额", re.I)
PERCENT = re.compile(r"(\d{1,2}(?:[.,]\d{1,2})?)\s?%")

ORG_NUMBER = re.compile(
    r"(?:org\.?\s*-?\s*n(?:r|o)\.?|organi[sz]ation\s*(?:number|no\.?)|organisasjonsnummer|"
    r"foretaksregisteret)\s*[:.]?\s*(?:NO\s?)?(\d{3}\s?\d{3}\s?\d{3})(\s?MVA)?",
    re.I,
)
VAT_ID = re.compile(
    r"(?:vat\s*(?:id|no\.?|number|reg\.?\s*no\.?)|ust-?\s*id(?:nr)?\.?|umsatzsteuer-id\w*|"
    r"mwst-?nr\.?)\s*[:.]?\s*([A-Z]{2}\s?[0-9A-Z]{8,12}(?:\s?MVA)?)",
    re.I,
)
NO_VAT_ID = re.compile(r"\b(NO\s?\d{3}\s?\d{3}\s?\d{3}\s?MVA)\b")

FLIGHT_NUMBER = re.compile(r"\b([A-Z]{2}|[A-Z]\d|\d[A-Z])\s?(\d{2,4})\b")
NOT_AIRLINE = {"NO", "DE", "GB", "SE", "DK", "US", "EU", "ID", "NR", "PO", "CH", "CN"}
IATA_PAIR = re.compile(
    r"\b([A-Z]{3})\s*(?:→|->|–|—|-|>|to|til|nach|until)\s*([A-Z]{3})\b|"
    r"\(([A-Z]{3})\)[^()\n]{0,40}?(?:→|->|–|—|-|to|til|nach)[^()\n]{0,40}?\(([A-Z]{3})\)"
)
IATA_LABELLED = re.compile(
    r"\b(?:from|fra|von|ab|departs?|departure|avgang|abflug|to|til|nach|an|arrival|ankomst|"
    r"ankunft|destination)\s*:?\s*(?:[A-Za-zÀ-ÿ .]{0,30}\()?([A-Z]{3})\b",
    re.I,
)
NOT_IATA = set(
    [
        "NOK",
        "EUR",
        "USD",
        "GBP",
        "SEK",
        "DKK",
        "CHF",
        "CNY",
        "MVA",
        "VAT",
        "PDF",
        "UTC",
        "CET",
        "GMT",
        "TAX",
        "PNR",
        "QTY",
        "REF",
        "THE",
        "AND",
        "FOR",
        "NOT",
        "ORG",
    ]
)
TIME = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b")

BOOKING_REF = re.compile(
    r"(?:booking\s*(?:reference|ref\.?|code)|PNR|bestillingsreferanse|bestillingsnummer|"
    r"referanse|buchungs(?:code|nummer|referenz)|confirmation\s*code|reservation\s*code|"
    r"record\s*locator|预订编号|订座记录)\s*[:#.]?\s*([A-Z0-9]{6})\b",
    re.I,
)
ORDER_NUMBER = re.compile(
    r"(?:order|ordre|bestilling|bestellung|bestell|auftrag|订单)\s*"
    r"(?:number|no\.?|nr\.?|nummer|id|#|号)?\s*[:#.]?\s*(#?[A-Z0-9][A-Z0-9-]{3,})",
    re.I,
)
INVOICE_NUMBER = re.compile(
    r"(?:invoice|faktura|rechnung|发票)\s*(?:number|no\.?|nr\.?|nummer|#|号码|号)\s*[:#.]?\s*"
    r"([A-Z0-9][A-Z0-9-/]{1,})",
    re.I,
)
PASSENGER = re.compile(
    r"(?:passenger(?:\s*name)?|passasjer(?:navn)?|passagier|reisende|traveller|旅客)\s*[:]?\s*"
    r"([A-Za-zÀ-ÿ][A-Za-zÀ-ÿ' .,/-]{2,60})",
    re.I,
)
CUSTOMER = re.compile(
    r"(?:bill\s*to|billed\s*to|customer|kunde|rechnungsempfänger|faktureres\s*til|sold\s*to)"
    r"\s*[:]?\s*([^\n]{2,80})",
    re.I,
)
PAYMENT = re.compile(
    r"\b(visa|mastercard|master card|amex|american express|bankkort|bankaxept|kontant|cash|"
    r"vipps|ec-karte|girocard|kartenzahlung|bar|apple pay|google pay|paypal|klarna|"
    r"debit card|credit card|kort)\b|支付宝|微信支付|现金",
    re.I,
)
DELIVERY = re.compile(
    r"(?:delivery|shipping|levering|frakt|lieferung|versand|zustellung|配送|送货)[^\n]*",
    re.I,
)
DUE_WORDS = re.compile(r"due|forfall|fällig|zahlbar bis|betalingsfrist|payable by|到期", re.I)
ISSUE_WORDS = re.compile(
    r"invoice date|fakturadato|rechnungsdatum|date of issue|issued|utstedt|datum|dato|date|日期",
    re.I,
)


def parse_number(raw: str) -> Decimal | None:
    """ "1 234,50" / "1.234,50" / "1,234.50" / "49,90" / "199" → Decimal."""
    text = raw.replace("\u00a0", " ").strip()
    last_sep = max(text.rfind(","), text.rfind("."))
    if last_sep != -1 and len(text) - last_sep - 1 in (1, 2):
        whole, frac = text[:last_sep], text[last_sep + 1 :]
    else:
        whole, frac = text, ""
    whole = re.sub(r"[ .,]", "", whole)
    try:
        return Decimal(f"{whole}.{frac}" if frac else whole)
    except InvalidOperation:
        return None


def find_dates(text: str) -> list[tuple[int, date]]:
    """Every date in the text with its offset, in reading order (day first when ambiguous)."""
    found: list[tuple[int, date]] = []
    for pattern, order in DATE_PATTERNS:
        for match in pattern.finditer(text):
            parts = dict(zip(order, match.groups(), strict=True))
            try:
                month = MONTHS[parts["M"].lower()] if "M" in parts else int(parts["m"])
                year = int(parts["y"]) if "y" in parts else 2000 + int(parts["yy"])
                found.append((match.start(), date(year, month, int(parts["d"]))))
            except (KeyError, ValueError):
                continue
    seen: set[int] = set()
    unique = []
    for start, day in sorted(found):
        if not any(abs(start - s) < 4 for s in seen):
            seen.add(start)
            unique.append((start, day))
    return unique


def find_amounts(line: str) -> list[tuple[Decimal, str | None]]:
    """Amounts in one line: with their currency when one is written beside them."""
    out: list[tuple[Decimal, str | None]] = []
    for match in AMOUNT.finditer(line):
        raw = match.group("a") or match.group("b")
        cur = (match.group("pre") or match.group("post") or "").lower()
        value = parse_number(raw)
        if value is not None:
            out.append((value, CURRENCIES.get(cur)))
    if not out:
        bare = BARE_AMOUNT.search(line)
        if bare and ("," in bare.group("n") or "." in bare.group("n")):
            value = parse_number(bare.group("n"))
            if value is not None:
                out.append((value, None))
    return out


def main_currency(text: str) -> str | None:
    counts = Counter(cur for line in text.splitlines() for _, cur in find_amounts(line) if cur)
    for code in ("NOK", "EUR", "USD", "GBP", "SEK", "DKK", "CHF", "CNY"):
        if re.search(rf"\b{code}\b", text):
            counts[code] += 1
    return counts.most_common(1)[0][0] if counts else None


def _labelled_amount(lines: list[str], index: int) -> Decimal | None:
    """The last amount on a labelled line, or on the next line when the label stands alone."""
    for candidate in (lines[index], lines[index + 1] if index + 1 < len(lines) else ""):
        amounts = find_amounts(candidate)
        if amounts:
            return amounts[-1][0]
    return None


def find_total(text: str) -> Decimal | None:
    """The amount on a total line ("Total", "Totalt", "Sum", "Gesamt", "Å betale", …); of
    several, the largest (a subtotal or a VAT line is no total)."""
    lines = text.splitlines()
    totals = [
        _labelled_amount(lines, i)
        for i, line in enumerate(lines)
        if TOTAL_WORDS.search(line)
        and not NOT_TOTAL.search(TOTAL_WORDS.split(line)[0] or "")
        and not re.search(r"\bsub", line, re.I)
    ]
    values = [t for t in totals if t is not None]
    return max(values) if values else None


def find_vat(text: str) -> dict[str, Any]:
    """VAT/MVA/MwSt: the amount and rate when written."""
    result: dict[str, Any] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not VAT_WORDS.search(line) or ORG_NUMBER.search(line) or VAT_ID.search(line):
            continue
        rate = PERCENT.search(line)
        if rate and "rate" not in result:
            result["rate"] = float(rate.group(1).replace(",", "."))
        stripped = PERCENT.sub("", line)
        amounts = find_amounts(stripped)
        if amounts and "amount" not in result:
            result["amount"] = str(amounts[-1][0])
        elif "amount" not in result and i + 1 < len(lines) and not rate:
            following = find_amounts(lines[i + 1])
            if following:
                result["amount"] = str(following[-1][0])
    return result


def find_org_numbers(text: str) -> list[str]:
    """Norwegian organisation numbers ("Org.nr 123 456 789 MVA") and VAT ids."""
    found: list[str] = []
    for match in ORG_NUMBER.finditer(text):
        number = re.sub(r"\s", "", match.group(1))
        found.append(f"{number} MVA" if match.group(2) else number)
    for match in [*VAT_ID.finditer(text), *NO_VAT_ID.finditer(text)]:
        found.append(re.sub(r"\s", "", match.group(1)))
    return list(dict.fromkeys(found))


def find_flight_numbers(text: str) -> list[str]:
    """ "SK 4035", "DY1302": a two-character airline designator and 2–4 digits, on lines that
    are not amounts, dates or organisation numbers."""
    found: list[str] = []
    for line in text.splitlines():
        if ORG_NUMBER.search(line) or VAT_ID.search(line):
            continue
        for match in FLIGHT_NUMBER.finditer(line):
            airline, number = match.groups()
            if airline in NOT_AIRLINE or not any(c.isalpha() for c in airline):
                continue
            found.append(f"{airline}{number}")
    return list(dict.fromkeys(found))


def find_airports(text: str) -> list[tuple[str, str]]:
    """(from, to) IATA pairs: "OSL → BGO", "Oslo (OSL) – Bergen (BGO)", or labelled From/To."""
    pairs: list[tuple[str, str]] = []
    for match in IATA_PAIR.finditer(text):
        a, b = (match.group(1), match.group(2)) if match.group(1) else match.group(3, 4)
        if a not in NOT_IATA and b not in NOT_IATA and a != b:
            pairs.append((a, b))
    if not pairs:
        codes = [c for c in IATA_LABELLED.findall(text) if c.isupper() and c not in NOT_IATA]
        pairs = [(codes[i], codes[i + 1]) for i in range(0, len(codes) - 1, 2)]
    return list(dict.fromkeys(pairs))


def first(pattern: re.Pattern[str], text: str) -> str | None:
    match = pattern.search(text)
    return match.group(1).strip(" .,:") if match else None


def dated_line(text: str, words: re.Pattern[str]) -> date | None:
    """The first date on a line naming it (or the line after)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if words.search(line):
            for candidate in (line, lines[i + 1] if i + 1 < len(lines) else ""):
                dates = find_dates(candidate)
                if dates:
                    return dates[0][1]
    return None
