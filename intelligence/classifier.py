"""The offline classifier: weighted keywords and patterns per type (English, German, Norwegian,
a little Chinese), plus the embedding similarity of the text to short label descriptions.

Each type's score is the sum of the weights of its cues found in the text (each cue counts
once), plus EMBEDDING_WEIGHT × how much closer the text is to that type's description than
to the mean of the others. The best type wins when its score reaches MIN_SCORE; otherwise the
document is Other. Confidence grows with the margin over the runner-up."""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass

from core.embeddings import get_embedder
from intelligence import patterns as p

logger = logging.getLogger(__name__)

TYPES = ("invoice", "receipt", "flight_ticket", "order_confirmation", "other")
MIN_SCORE = 2.0
EMBEDDING_WEIGHT = 4.0
TEXT_LIMIT = 4000  # characters read: the head of a document says what it is

_I = re.I
CUES: dict[str, list[tuple[re.Pattern[str], float]]] = {
    "invoice": [
        (re.compile(r"\b(invoice|faktura|rechnung|fattura|factura)\b", _I), 3.0),
        (re.compile(r"发票|發票"), 3.0),
        (p.INVOICE_NUMBER, 1.5),
        (
            re.compile(
                r"\b(due date|payment due|forfallsdato|forfall|fällig\w*|zahlbar bis|"
                r"zahlungsziel|betalingsfrist|payable within|payment terms|"
                r"betalingsbetingelser)\b",
                _I,
            ),
            2.5,
        ),
        (
            re.compile(
                r"\b(bill(ed)? to|faktureres til|rechnungsempfänger|kid|iban|bic|swift|"
                r"kontonummer|account number|bankverbindung|bank details)\b",
                _I,
            ),
            1.5,
        ),
        (re.compile(r"\b(amount due|balance due|å betale|zu zahlen|rechnungsbetrag)\b", _I), 1.0),
        (re.compile(r"到期|付款期限|纳税人识别号"), 1.5),
    ],
    "receipt": [
        (
            re.compile(
                r"\b(receipt|kvittering|quittung|kassenbon|kassenbeleg|kassazettel|"
                r"salgskvittering|bong)\b",
                _I,
            ),
            3.0,
        ),
        (re.compile(r"收据|收據|小票|购物凭证"), 3.0),
        (
            re.compile(
                r"\b(cash|kontant|bar(zahlung)?|change|veksel\w*|rückgeld|gegeben|"
                r"bankaxept|bankkort|terminal|kartenzahlung|girocard|ec-karte|contactless|"
                r"kontaktløs|card payment|visa|mastercard|vipps)\b",
                _I,
            ),
            1.5,
        ),
        (
            re.compile(
                r"\b(thank you for (shopping|your visit)|takk for (handelen|besøket)|"
                r"vielen dank für ihren einkauf|velkommen igjen|welcome back|"
                r"kasse|cashier|kasserer|kassierer|store|butikk|filiale?)\b",
                _I,
            ),
            1.5,
        ),
        (re.compile(r"\b(mva|moms|mwst)\b", _I), 0.5),
        # A paid total with nothing else to say what it is: most often a till receipt.
        (re.compile(r"\b(paid|betalt|bezahlt|payé)\b", _I), 1.0),
        (p.TOTAL_WORDS, 0.5),
        (re.compile(r"谢谢惠顾|现金|找零|微信支付|支付宝"), 1.5),
    ],
    "flight_ticket": [
        (
            re.compile(
                r"\b(boarding pass|boardingkort|bordkarte|e-?ticket|flight ticket|"
                r"flybillett|flugticket|itinerary|reiserute|reiseplan|flugschein)\b",
                _I,
            ),
            3.0,
        ),
        (re.compile(r"登机牌|机票|航班|航空"), 3.0),
        (
            re.compile(
                r"\b(flight|flug|fly|flyvning|airline|flyselskap|fluggesellschaft|"
                r"airport|lufthavn|flughafen)\b",
                _I,
            ),
            1.5,
        ),
        (
            re.compile(
                r"\b(gate|seat|sete|sitzplatz|boarding|terminal|baggage|bagasje|gepäck|"
                r"cabin|economy|business class)\b",
                _I,
            ),
            1.0,
        ),
        (
            re.compile(
                r"\b(booking reference|booking ref|pnr|bestillingsreferanse|"
                r"buchungs(code|nummer)|record locator|confirmation code)\b",
                _I,
            ),
            1.5,
        ),
        (re.compile(r"\b(passenger|passasjer|passagier|reisende)\b", _I), 1.0),
        (p.IATA_PAIR, 2.0),
    ],
    "order_confirmation": [
        (
            re.compile(
                r"\b(order confirmation|ordrebekreftelse|bestillingsbekreftelse|"
                r"bestellbestätigung|auftragsbestätigung|bestätigung ihrer bestellung|"
                r"confirmation of your order)\b",
                _I,
            ),
            4.0,
        ),
        (re.compile(r"订单确认|订单号|订单"), 3.0),
        (
            re.compile(
                r"\b(your order|din (ordre|bestilling)|ihre bestellung|we have received|"
                r"vi har mottatt|wir haben .{0,30}erhalten|thank you for your order|"
                r"takk for (din )?bestilling\w*|danke für ihre bestellung)\b",
                _I,
            ),
            2.5,
        ),
        (
            re.compile(
                r"\b(order (number|no|#|id)|ordre ?(nummer|nr)|bestell ?(nummer|nr)|"
                r"auftragsnummer)\b",
                _I,
            ),
            2.0,
        ),
        (
            re.compile(
                r"\b(shipping|delivery|levering|leveranse|frakt|lieferung|versand|"
                r"zustellung|estimated|expected|forventet|voraussichtlich|tracking|"
                r"sporing|sendungsverfolgung)\b",
                _I,
            ),
            1.5,
        ),
    ],
}
DESCRIPTIONS = {
    "invoice": "An invoice: a bill from a vendor to a customer with an invoice number, "
    "issue date, due date, payment details, line items, VAT and the amount due.",
    "receipt": "A receipt from a shop or restaurant: items bought, total paid, VAT, "
    "payment by card or cash, the store name, date and time.",
    "flight_ticket": "A flight ticket or boarding pass: passenger name, booking reference, "
    "flight numbers, departure and arrival airports and times, seat and gate.",
    "order_confirmation": "An order confirmation from an online shop: order number, the items "
    "ordered, the total, shipping and the expected delivery date.",
}


# The descriptions' vectors per embedding model: embedded once per process.
_DESCRIPTION_VECTORS: dict[str, list[list[float]]] = {}


@dataclass(frozen=True)
class Classification:
    doc_type: str
    confidence: float
    scores: dict[str, float]


def cue_scores(text: str) -> dict[str, float]:
    head = text[:TEXT_LIMIT]
    return {
        kind: sum(weight for pattern, weight in cues if pattern.search(head))
        for kind, cues in CUES.items()
    }


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def embedding_scores(text: str) -> dict[str, float]:
    """How much closer the text is to each description than to the others' mean (0 when no
    embedder can be had: classification never waits on or fails for it)."""

    try:
        embedder = get_embedder()
        labels = _DESCRIPTION_VECTORS.get(embedder.model_name)
        if labels is None:
            labels = embedder.embed(list(DESCRIPTIONS.values()))
            _DESCRIPTION_VECTORS[embedder.model_name] = labels
        (vector,) = embedder.embed([text[:1500]])
    except Exception:
        logger.info("no embeddings for classification; keywords only", exc_info=True)
        return dict.fromkeys(DESCRIPTIONS, 0.0)
    sims = {kind: _cosine(vector, v) for kind, v in zip(DESCRIPTIONS, labels, strict=True)}
    return {kind: sim - (sum(sims.values()) - sim) / (len(sims) - 1) for kind, sim in sims.items()}


def classify(text: str, *, use_embeddings: bool = True) -> Classification:
    """The document type of `text` (one of TYPES) with a confidence in [0, 1]."""
    scores = cue_scores(text)
    if use_embeddings and text.strip():
        for kind, margin in embedding_scores(text).items():
            scores[kind] += EMBEDDING_WEIGHT * margin
    ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    (best, top), (_, second) = ranked[0], ranked[1]
    if top < MIN_SCORE:
        confidence = 0.5 + 0.4 * (1 - max(top, 0) / MIN_SCORE)
        return Classification("other", round(confidence, 2), scores)
    margin = top - max(second, 0)
    confidence = min(0.99, 0.5 + 0.5 * (1 - math.exp(-margin / 3)) + min(top, 10) / 100)
    return Classification(best, round(confidence, 2), scores)
