"""Make the test samples in this directory (tests/samples/README.md says what each one is for).

    .venv/bin/python tests/samples/make_samples.py

The files are committed, so tests never run this; tests/test_samples.py checks it still makes
them. Everything here is deterministic (fixed PDF ids, no dates), except the AES salt of the
password-protected copy, which is checked by its decrypted content instead.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pikepdf
from pikepdf import Dictionary, Name
from PIL import Image, ImageDraw, ImageFont

HERE = Path(__file__).resolve().parent
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
PASSWORD = "opensesame"  # of locked.pdf; kept out of its file name, which uploads show

# text.pdf: (heading, the page's known sentence, filler sentences). Each page has words of its
# own ("heron", "kingfisher", "otter"), so a keyword search tells the pages apart.
TEXT_PAGES = [
    (
        "1 Herons of the Millpond",
        "The grey heron waits motionless by the millpond until dusk.",
        "Herons nest in tall alder trees along the northern bank. A patient heron can stand "
        "in shallow water for an hour before it strikes at a passing fish. Survey teams count "
        "the nests each spring and note how many chicks leave them.",
    ),
    (
        "2 Kingfishers along the Weir",
        "A kingfisher dives from the willow branch above the weir.",
        "Kingfishers dig their burrows into the steep clay banks below the weir. The bright "
        "blue bird is seen most often in the early morning, when the water is calm. Volunteers "
        "record every sighting with its time and the nearest landmark.",
    ),
    (
        "3 Otters at the Sluice Gate",
        "Two otters were filmed at the sluice gate on a Tuesday night.",
        "Otters travel long distances along the river at night. Their tracks and spraints on "
        "the stones beside the sluice gate show where they rest. Cameras by the gate now "
        "record the otters on most nights of the year.",
    ),
]
OTHER_PAGES = [
    (
        "1 Sourdough Starter",
        "Feed the sourdough starter with rye flour every morning.",
        "A healthy starter doubles in size within six hours of feeding. Keep the jar loosely "
        "covered at room temperature and discard half of it before each feed.",
    ),
    (
        "2 Baking the Loaf",
        "Bake the loaf in a covered cast iron pot for forty minutes.",
        "Shape the dough the evening before and let it rise slowly in the cold. Score the top "
        "with a sharp blade just before it goes into the hot oven.",
    ),
]
# long.pdf: LONG_PAGES pages of about 1,800 characters (three chunks each), for tests that need a
# run to last a while (a worker killed mid-embedding).
LONG_PAGES = 50
_ANIMALS = ["heron", "otter", "kingfisher", "dragonfly", "water vole", "grass snake", "moorhen"]
_PLACES = ["the weir", "the sluice gate", "the alder wood", "the reed bed", "the old mill"]
_TIMES = ["at dawn", "before noon", "in the afternoon", "at dusk", "after midnight"]


def long_pages() -> list[tuple[str, str, str]]:
    pages = []
    for n in range(1, LONG_PAGES + 1):
        sentences = [
            f"On survey day {n * 7 + i}, a {_ANIMALS[(n + i) % len(_ANIMALS)]} was seen near "
            f"{_PLACES[(n * 3 + i) % len(_PLACES)]} {_TIMES[(n + 2 * i) % len(_TIMES)]}, and "
            f"the observer counted {(n * 13 + i * 5) % 40 + 2} of them in total."
            for i in range(14)
        ]
        pages.append((f"{n} Survey Day {n}", sentences[0], " ".join(sentences[1:])))
    return pages


# manual.pdf: a small technical manual, the chat tests' "ready manual". Each page: a heading, then
# blocks, each ("para", text) wrapped, ("list", items) one bullet a line, or ("code", lines) in
# Courier. Page 2's lead-in and list answer "What does lantern build check before it writes
# anything?" (a unit of several lines); page 3's first sentence says why a build can refuse.
MANUAL_PAGES: list[tuple[str, list[tuple[str, str | list[str]]]]] = [
    (
        "1 Installing Lantern",
        [
            (
                "para",
                "Lantern is a small command-line tool that turns a folder of text pages "
                "into a website. It needs Python 3.10 or newer and runs on Linux, macOS and "
                "Windows.",
            ),
            ("para", "Install it with pip, then check the version it prints:"),
            ("code", ["$ pip install lantern-site", "$ lantern --version", "lantern 2.4.1"]),
            (
                "para",
                "The configuration lives in a file called lantern.toml at the top of the "
                "site's folder. A new site gets one from lantern init.",
            ),
        ],
    ),
    (
        "2 Building a Site",
        [
            (
                "para",
                "Run lantern build in the folder of your site to write the finished pages "
                "to the public folder. The pages folder holds one text file for each page.",
            ),
            ("para", "Before it writes anything, lantern build checks three things:"),
            (
                "list",
                [
                    "every page starts with a title line,",
                    "every link points to a page that exists,",
                    "no file in the public folder was changed by hand.",
                ],
            ),
            ("code", ["$ lantern build --strict", "checked 12 pages, built 12 pages"]),
            (
                "para",
                "With the strict option a broken link stops the build instead of being "
                "reported as a warning.",
            ),
        ],
    ),
    (
        "3 Publishing the Site",
        [
            (
                "para",
                "Lantern never overwrites a public folder that holds files it did not "
                "write, so a build cannot delete your own work.",
            ),
            (
                "para",
                "Copy the public folder to any web server, or run lantern publish to "
                "upload it over SFTP. The upload sends only the files that changed since the last "
                "one.",
            ),
            ("code", ["$ lantern publish --host example.org"]),
            (
                "para",
                "The host, the user name and the remote folder can also be set in "
                "lantern.toml under the publish heading.",
            ),
        ],
    ),
]
# scanned.pdf: what its page images say (printed, then scanned: no text layer).
SCANNED_PAGES = [
    ["Lighthouse Keeping Log", "The lamp was lit at seven", "and the fog horn sounded twice."],
    ["Second Night", "A fishing boat passed the rocks", "before midnight in calm weather."],
]
# printed.png: a photo or screenshot of printed text (tests/fixtures/documents.py text_image).
PRINTED_LINES = [
    "Heron Millpond Survey",
    "The heron waited by the millpond",
    "until dusk on Tuesday.",
]


def _literal(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _wrap(text: str, width: int = 90) -> list[str]:
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return [*lines, line] if line else lines


def _save(pdf: pikepdf.Pdf, *, compress: bool = False) -> bytes:
    out = io.BytesIO()
    pdf.save(out, deterministic_id=True, compress_streams=compress)
    return out.getvalue()


def text_pdf(pages: list[tuple[str, str, str]], title: str, *, compress: bool = False) -> bytes:
    """Pages with an 18 pt bold heading, 10 pt body text and the page number at the foot, in the
    standard PDF fonts (nothing embedded)."""
    pdf = pikepdf.new()

    def font(base: Name) -> pikepdf.Object:
        return pdf.make_indirect(
            Dictionary(
                Type=Name.Font, Subtype=Name.Type1, BaseFont=base, Encoding=Name.WinAnsiEncoding
            )
        )

    fonts = Dictionary(F1=font(Name.Helvetica), F2=font(Name("/Helvetica-Bold")))
    for number, (heading, known, filler) in enumerate(pages, start=1):
        page = pdf.add_blank_page(page_size=(612, 792))
        page.Resources = Dictionary(Font=fonts)
        ops = ["BT", "/F2 18 Tf", "72 720 Td", f"({_literal(heading)}) Tj", "ET"]
        ops += ["BT", "/F1 10 Tf", "14 TL", "72 690 Td"]
        for paragraph in (known, filler, known.replace(".", ", as the survey notes.")):
            ops += [f"({_literal(line)}) Tj T*" for line in _wrap(paragraph)]
            ops.append("T*")
        ops += ["ET", "BT", "/F1 9 Tf", "300 40 Td", f"({number}) Tj", "ET"]
        page.Contents = pdf.make_stream("\n".join(ops).encode("cp1252"))
    pdf.docinfo = pdf.make_indirect(Dictionary(Title=pikepdf.String(title)))
    return _save(pdf, compress=compress)


def manual_pdf() -> bytes:
    """MANUAL_PAGES in the standard PDF fonts: an 18 pt bold heading, 10 pt Helvetica
    paragraphs and bulleted lists, 9 pt Courier code (11 pt apart), a blank line between blocks
    and the page number at the foot of each page."""
    pdf = pikepdf.new()

    def font(base: Name) -> pikepdf.Object:
        return pdf.make_indirect(
            Dictionary(
                Type=Name.Font, Subtype=Name.Type1, BaseFont=base, Encoding=Name.WinAnsiEncoding
            )
        )

    fonts = Dictionary(
        F1=font(Name.Helvetica), F2=font(Name("/Helvetica-Bold")), F3=font(Name.Courier)
    )
    for number, (heading, blocks) in enumerate(MANUAL_PAGES, start=1):
        page = pdf.add_blank_page(page_size=(612, 792))
        page.Resources = Dictionary(Font=fonts)
        ops = ["BT", "/F2 18 Tf", "72 720 Td", f"({_literal(heading)}) Tj", "ET"]
        ops += ["BT", "14 TL", "72 690 Td"]
        for kind, content in blocks:
            if kind == "para":
                assert isinstance(content, str)
                ops.append("/F1 10 Tf")
                ops += [f"({_literal(line)}) Tj T*" for line in _wrap(content)]
            elif kind == "list":
                ops.append("/F1 10 Tf")
                ops += [f"(• {_literal(item)}) Tj T*" for item in content]  # cp1252 0x95
            else:
                ops += ["/F3 9 Tf", "11 TL"]  # set solid, as code is
                ops += [f"({_literal(line)}) Tj T*" for line in content]
                ops.append("14 TL")
            ops.append("T*")
        ops += ["ET", "BT", "/F1 9 Tf", "300 40 Td", f"({number}) Tj", "ET"]
        page.Contents = pdf.make_stream("\n".join(ops).encode("cp1252"))
    pdf.docinfo = pdf.make_indirect(Dictionary(Title=pikepdf.String("Lantern User Manual")))
    return _save(pdf)


def page_image(
    lines: list[str], size: tuple[int, int] = (1275, 1650), *, margin: int = 120, step: int = 90
) -> Image.Image:
    """Printed lines (a page at 150 dpi by default): dark text on white, large enough for OCR."""
    image = Image.new("L", size, 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(str(FONT), 44)
    for i, line in enumerate(lines):
        draw.text((margin, margin + step * i), line, fill=0, font=font)
    return image


def scanned_pdf() -> bytes:
    """Image-only pages (no text layer), as a scanner makes them."""
    pdf = pikepdf.new()
    for lines in SCANNED_PAGES:
        image = page_image(lines).convert("1")  # 1 bit per pixel: a few KB a page
        page = pdf.add_blank_page(page_size=(612, 792))
        xobject = pdf.make_stream(
            image.tobytes(),
            Type=Name.XObject,
            Subtype=Name.Image,
            Width=image.width,
            Height=image.height,
            ColorSpace=Name.DeviceGray,
            BitsPerComponent=1,
        )
        page.Resources = Dictionary(XObject=Dictionary(Im1=xobject))
        page.Contents = pdf.make_stream(b"q 612 0 0 792 0 0 cm /Im1 Do Q")
    return _save(pdf, compress=True)


def locked_pdf(text: bytes) -> bytes:
    """text.pdf under a user password (AES-256)."""
    out = io.BytesIO()
    with pikepdf.open(io.BytesIO(text)) as pdf:
        pdf.save(out, encryption=pikepdf.Encryption(user=PASSWORD, owner=PASSWORD, R=6))
    return out.getvalue()


def broken_pdf(text: bytes) -> bytes:
    """text.pdf cut off after its first page's content: an upload that broke off."""
    return text[: len(text) // 3]


def printed_png() -> bytes:
    out = io.BytesIO()
    image = page_image(PRINTED_LINES, size=(1000, 360), margin=30, step=100)
    image.convert("RGB").save(out, format="PNG")
    return out.getvalue()


def samples() -> dict[str, bytes]:
    """Every sample by file name (locked.pdf's bytes differ from run to run: its AES salt)."""
    text = text_pdf(TEXT_PAGES, "Wildlife of the Millpond")
    return {
        "text.pdf": text,
        "other.pdf": text_pdf(OTHER_PAGES, "Bread at Home"),
        "long.pdf": text_pdf(long_pages(), "Survey Days", compress=True),
        "manual.pdf": manual_pdf(),
        "scanned.pdf": scanned_pdf(),
        "locked.pdf": locked_pdf(text),
        "broken.pdf": broken_pdf(text),
        "printed.png": printed_png(),
    }


if __name__ == "__main__":
    for name, data in samples().items():
        (HERE / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes", file=sys.stderr)
