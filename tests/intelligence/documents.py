"""Five documents for the acceptance test of issue #17, generated here (no downloads): a
Norwegian grocery receipt as a photo-like PNG, an English invoice PDF, a flight ticket PDF, an
order confirmation image and an unrelated text PDF."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import cast

from PIL import Image, ImageDraw, ImageFilter, ImageFont

FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
MONO = Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf")

RECEIPT_LINES = [
    "REMA 1000 Grünerløkka",
    "Org.nr. 987 654 321 MVA",
    "Thorvald Meyers gate 40, 0555 Oslo",
    "KVITTERING",
    "Dato: 14.03.2025  Kl. 17:42",
    "Melk lettmelk 1L          21,90",
    "Brød grovbrød             34,50",
    "Egg 12 stk                49,90",
    "Bananer 1,2 kg            28,74",
    "Kaffe filtermalt          69,90",
    "Ost Norvegia              26,56",
    "TOTALT NOK               231,50",
    "Herav MVA 15%             30,20",
    "Betalt med bankkort  VISA",
    "Takk for handelen!",
]
INVOICE_LINES = [
    "INVOICE",
    "Invoice number: INV-2025-0042",
    "Invoice date: 2025-02-03",
    "Due date: 2025-03-05",
    "From: Acme Consulting Ltd, VAT number GB123456789",
    "To: Northwind Traders AS",
    "Description                         Amount",
    "Software architecture review        1,200.00",
    "Workshop facilitation, 2 days         800.00",
    "Subtotal                            2,000.00 GBP",
    "VAT 20%                               400.00 GBP",
    "Total due                           2,400.00 GBP",
    "Please pay by bank transfer within 30 days.",
]
TICKET_LINES = [
    "E-TICKET / BOARDING PASS",
    "Passenger: NORDMANN/OLA MR",
    "Booking reference: X7K2PQ",
    "Flight SK 4035  Oslo (OSL) - Bergen (BGO)",
    "Departure: 2025-04-11 07:15  Arrival: 2025-04-11 08:10",
    "Flight SK 4040  Bergen (BGO) - Oslo (OSL)",
    "Departure: 2025-04-13 19:30  Arrival: 2025-04-13 20:25",
    "Seat 12A, Economy, 1 checked bag 23 kg",
    "Ticket number 117-2345678901",
]
ORDER_LINES = [
    "ORDER CONFIRMATION",
    "Thank you for your order!",
    "Order number: 100-4471923",
    "Order date: 2025-01-20",
    "1 x Wireless headphones       89.99 EUR",
    "2 x USB-C cable                19.98 EUR",
    "Shipping                        4.99 EUR",
    "Order total                   114.96 EUR",
    "Estimated delivery: 2025-01-24",
    "Shipping to: Ola Nordmann, Oslo",
]
ESSAY_LINES = [
    "Movable Type and the Spread of Ideas",
    "Johannes Gutenberg's press combined oil-based ink, a screw press adapted from",
    "wine making and type cast from a lead alloy. Within fifty years printers worked in",
    "more than two hundred cities, and the price of a book fell so far that students",
    "could own the texts they studied. Historians still debate how much the press",
    "changed how people read, argued and remembered.",
]


def _draw(lines: list[str], size: tuple[int, int], font: Path, points: int) -> Image.Image:
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    face = ImageFont.truetype(str(font), points)
    for i, line in enumerate(lines):
        draw.text((40, 40 + int(points * 1.6) * i), line, fill="black", font=face)
    return image


def photo_like(image: Image.Image, seed: int = 17) -> Image.Image:
    """Paper on a table, a little tilted, soft and noisy, like a phone photo of a receipt."""
    rng = random.Random(seed)  # noqa: S311 - noise, not secrets
    paper = image.rotate(
        1.5, expand=True, fillcolor=(120, 104, 86), resample=Image.Resampling.BICUBIC
    )
    table = Image.new("RGB", (paper.width + 80, paper.height + 80), (120, 104, 86))
    table.paste(paper, (40, 40))
    pixels = table.load()
    assert pixels is not None
    for _ in range(table.width * table.height // 60):
        x, y = rng.randrange(table.width), rng.randrange(table.height)
        r, g, b = cast("tuple[int, int, int]", pixels[x, y])
        d = rng.randint(-25, 25)
        pixels[x, y] = (max(0, min(255, r + d)), max(0, min(255, g + d)), max(0, min(255, b + d)))
    return table.filter(ImageFilter.GaussianBlur(0.6))


def png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def text_pdf(lines: list[str], title: str = "document") -> bytes:
    """A one-page PDF with `lines` as real text (Helvetica, WinAnsi), written by hand."""

    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    body = (
        "BT /F1 12 Tf 16 TL 56 780 Td "
        + " ".join(f"({escape(line)}) Tj T*" for line in lines)
        + " ET"
    )
    stream = body.encode("cp1252")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Title (" + escape(title).encode("cp1252") + b") >>",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 6 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def five_documents() -> dict[str, tuple[str, bytes]]:
    """kind → (file name, bytes)."""
    receipt = photo_like(_draw(RECEIPT_LINES, (900, 1100), MONO, 30))
    order = _draw(ORDER_LINES, (1100, 760), FONT, 34)
    return {
        "receipt": ("IMG_20250314_174233.png", png(receipt)),
        "invoice": ("scan0042.pdf", text_pdf(INVOICE_LINES, "scan0042")),
        "ticket": ("eticket.pdf", text_pdf(TICKET_LINES, "eticket")),
        "order": ("Screenshot 2025-01-20.png", png(order)),
        "essay": ("terns.pdf", text_pdf(ESSAY_LINES, "terns")),
    }
