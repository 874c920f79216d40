"""Child-process entry point: `python -m attachments.pdf.child MODE PATH [PAGES]`.

Also for images and thumbnails: mode `image` OCRs an image file as page 1; modes
`thumb-pdf` and `thumb-image` write a small WebP of the first page or the image to the path
given in place of PAGES.

Runs one untrusted PDF through pdfminer.six (mode `text`: pages asked for on stdin),
pypdfium2's plain text per page (mode `fast`: the first pass, every K-th page from the I-th,
"I K" given on stdin) or pypdfium2 + RapidOCR (mode `ocr`: the PAGES given) under an
address-space limit, and writes one JSON object per line to stdout. On stdin come (for a
standby child, PATH `-`) the file's path, (mode `text`) the page limit or (mode `fast`) the
"I K" slice, and the password, so it never shows in `ps`; then (mode
`text`) the page numbers. The parent enforces the wall-clock timeout by killing us; a
MemoryError or the kernel's refusal ends us here.

Exit codes: 0 done, 3 wrong or missing password, 4 damaged/unsupported file, 5 out of memory.
"""

from __future__ import annotations

import json
import os
import re
import resource
import sys
import unicodedata
from collections.abc import Iterator
from typing import Any

EXIT_PASSWORD = 3
EXIT_DAMAGED = 4
EXIT_MEMORY = 5


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _limit_memory() -> None:
    limit_mb = int(os.environ.get("NOTEBOOK_CHILD_MEMORY_MB", "0"))
    if limit_mb > 0:
        limit = limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _parse_pages(spec: str) -> list[int]:
    pages: list[int] = []
    for part in spec.split(","):
        if "-" in part:
            first, last = part.split("-")
            pages.extend(range(int(first), int(last) + 1))
        elif part:
            pages.append(int(part))
    return pages


def _open_pdfminer(path: str, password: str) -> Any:
    # not at import: each child kind loads only its own libraries (pdfminer here, the text child)
    from pdfminer.pdfdocument import PDFDocument
    from pdfminer.pdfparser import PDFParser

    fp = open(path, "rb")  # noqa: SIM115 - lives as long as this short process
    return PDFDocument(PDFParser(fp), password=password)


# TeX-made PDFs often draw accents as separate spacing characters ("w¨ahrend"); put them back
# on their letter so words are searchable and quotable ("während").
_SPACING_ACCENTS = {
    "¨": "\u0308",
    "´": "\u0301",
    "˜": "\u0303",
    "ˆ": "\u0302",
    "¸": "\u0327",
    "˚": "\u030a",
}
_ACCENT_BEFORE_LETTER = re.compile("([" + "".join(_SPACING_ACCENTS) + "]) ?([A-Za-z])")


def fix_accents(text: str) -> str:
    if not any(ch in text for ch in _SPACING_ACCENTS):
        return text
    fixed = _ACCENT_BEFORE_LETTER.sub(lambda m: m.group(2) + _SPACING_ACCENTS[m.group(1)], text)
    return unicodedata.normalize("NFC", fixed)


# pdfminer writes "(cid:13)" for a glyph its font gives no Unicode for (TeX's symbol fonts
# without a ToUnicode map: the circle of "©", quotes, brackets). The code means nothing to a
# reader, a search or a quote, and which character it stands for depends on the font, so it is
# dropped, and a space before it too where no word follows ("authors (cid:14)." → "authors.",
# "the (cid:8)url(cid:9) package" → "the url package").
GLYPH_CODE = re.compile(
    r"^(?:\(cid:\d+\))+[ \t]*"  # at a line's start, with the space after
    r"|[ \t]*\(cid:\d+\)(?=[ \t.,;:!?)\]]|$)"  # before a space, punctuation or the line's end
    r"|\(cid:\d+\)",
    re.MULTILINE,
)


def strip_glyph_codes(text: str) -> str:
    """`text` without pdfminer's "(cid:NN)" codes of unmapped glyphs."""
    return GLYPH_CODE.sub("", text) if "(cid:" in text else text


def _line_style(line: Any) -> tuple[float, bool]:
    # pdfminer: the text child's library, not loaded by the OCR child
    from pdfminer.layout import LTChar

    total = 0.0
    count = 0
    bold = 0
    for ch in line:
        if isinstance(ch, LTChar):
            total += ch.size
            count += 1
            name = ch.fontname.lower()
            if "bold" in name or "black" in name or "heavy" in name or ".b" in name[-3:]:
                bold += 1
    if not count:
        return 0.0, False
    return round(total / count, 2), bold * 2 > count


def _largest_image(items: Any) -> int | None:
    """Pixels of the page's largest image as its dictionary declares them (/Width × /Height;
    nothing is decoded), or None without images. A size that is not a number counts as 1."""
    # pdfminer: the text child's library, not loaded by the OCR child
    from pdfminer.layout import LTFigure, LTImage

    largest: int | None = None
    for item in items:
        if isinstance(item, LTImage):
            width, height = item.srcsize
            valid = isinstance(width, int) and isinstance(height, int)
            pixels = max(1, width * height) if valid else 1
        elif isinstance(item, LTFigure):
            pixels = _largest_image(item)
        else:
            continue
        if pixels is not None and (largest is None or pixels > largest):
            largest = pixels
    return largest


def _text_boxes(layout: Any) -> list[Any]:
    """The page's text boxes. Text drawn inside forms (Form XObjects) counts only on a page
    without text of its own: there it is the page (a page placed whole, as LaTeX's pdfpages
    does); elsewhere it is mostly labels of a chart."""
    # pdfminer: the text child's library, not loaded by the OCR child
    from pdfminer.layout import LTFigure, LTTextContainer

    def in_forms(items: Any) -> Iterator[Any]:
        for item in items:
            if isinstance(item, LTFigure):
                yield from (box for box in item if isinstance(box, LTTextContainer))
                yield from in_forms(item)

    own = [item for item in layout if isinstance(item, LTTextContainer)]
    return own or list(in_forms(layout))


def _declared_page_count(doc: Any) -> int:
    # pdfminer: the text child's library, not loaded by the OCR child
    from pdfminer.pdftypes import resolve1

    try:
        count = resolve1(resolve1(doc.catalog["Pages"])["Count"])
    except Exception:
        return 0
    return count if isinstance(count, int) else 0


def run_text(path: str, password: str, max_pages: int) -> None:
    """Announce the page count, then extract the pages the parent asks for on stdin (one
    number a line, 0 to stop): lines with font size and boldness, for heading detection."""
    # pdfminer: the text child's library, not loaded by the OCR child
    from pdfminer.converter import PDFPageAggregator
    from pdfminer.layout import LAParams, LTTextLine
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage

    doc = _open_pdfminer(path, password)
    pages: list[Any] = []
    for page in PDFPage.create_pages(doc):  # walks the page tree only; content comes later
        if max_pages and len(pages) == max_pages:
            # Over the limit: walking the rest (10,000 pages take seconds) would change nothing.
            _emit({"page_count": _declared_page_count(doc), "over_limit": True})
            return
        pages.append(page)
    _emit({"page_count": len(pages)})
    manager = PDFResourceManager(caching=True)
    # all_texts: lay out text inside forms too, for pages whose text is all there.
    device = PDFPageAggregator(manager, laparams=LAParams(all_texts=True))
    interpreter = PDFPageInterpreter(manager, device)
    for request in sys.stdin:
        number = int(request)
        if not 0 < number <= len(pages):
            break
        interpreter.process_page(pages[number - 1])
        layout = device.get_result()
        parts: list[str] = []
        lines: list[tuple[int, int, float, bool]] = []
        offset = 0
        for box in _text_boxes(layout):
            box_started = False
            for line in box:
                if not isinstance(line, LTTextLine):
                    continue
                text = strip_glyph_codes(fix_accents(line.get_text().rstrip("\n").rstrip()))
                if not text.strip():
                    continue
                sep = "\n" if box_started else ("\n\n" if parts else "")
                offset += len(sep)
                parts.append(sep + text)
                size, bold = _line_style(line)
                lines.append((offset, offset + len(text), size, bold))
                offset += len(text)
                box_started = True
        record: dict[str, Any] = {"page": number, "text": "".join(parts), "lines": lines}
        if (pixels := _largest_image(layout)) is not None:
            record["image_pixels"] = pixels
        _emit(record)


# PDFium's text: lines end "\r\n"; \x02 marks a hyphen at a line end, \ufffe an unmapped glyph;
# other C0 controls are glyphs of fonts without a Unicode map (they would only break words).
_PDFIUM_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f\ufffe\uffff]")


def clean_pdfium_text(text: str) -> str:
    """PDFium's page text as stored and quoted: "\n" line ends, line-end hyphens kept as "-",
    control characters dropped, detached TeX accents put back, blank space trimmed."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x02", "-")
    text = _PDFIUM_CONTROLS.sub("", text)
    lines = [line.rstrip() for line in text.split("\n")]
    return fix_accents("\n".join(lines).strip())


def run_fast(path: str, password: str, first: int, step: int) -> None:
    """The first pass: every `step`-th page's plain text from page `first` (1-based), as
    PDFium reads it (no layout, no styles), one record a page after the page count."""
    # PDFium only in the children that read or render pages
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(path, password=password or None)
    total = len(pdf)
    _emit({"page_count": total})
    for number in range(first, total + 1, step):
        page = pdf[number - 1]
        textpage = page.get_textpage()
        text = textpage.get_text_range()
        textpage.close()
        page.close()
        _emit({"page": number, "text": clean_pdfium_text(text)})


ROW_OVERLAP = 0.5  # share of the smaller box's height two boxes' centres may differ by in a row


def ocr_text(result: Any) -> str:
    """The text OCR found, in reading order: its boxes grouped into rows (a box joins a row
    when their vertical centres are within ROW_OVERLAP of the smaller height, which survives a
    slightly tilted photo), each row left to right, rows top to bottom. In detection order a
    receipt's amounts can come before their labels ("231,50" then "TOTALT NOK")."""
    texts = [str(t).strip() for t in (getattr(result, "txts", None) or ())]
    boxes = getattr(result, "boxes", None)
    if boxes is None or len(boxes) != len(texts):
        return "\n".join(t for t in texts if t)
    words = []
    for text, box in zip(texts, boxes, strict=True):
        if not text:
            continue
        ys = [float(point[1]) for point in box]
        xs = [float(point[0]) for point in box]
        words.append(((min(ys) + max(ys)) / 2, max(max(ys) - min(ys), 1.0), min(xs), text))
    rows: list[list[tuple[float, float, float, str]]] = []
    for word in sorted(words):
        centre, height = word[0], word[1]
        row = rows[-1] if rows else None
        if row is not None:
            row_centre = sum(w[0] for w in row) / len(row)
            row_height = min(w[1] for w in row)
            if abs(centre - row_centre) <= ROW_OVERLAP * min(height, row_height):
                row.append(word)
                continue
        rows.append([word])
    return "\n".join(" ".join(w[3] for w in sorted(row, key=lambda w: w[2])) for row in rows)


def run_ocr(path: str, password: str, pages: list[int]) -> None:
    # OCR's libraries (RapidOCR's ONNX models, ~0.9 GB resident) only in the OCR child
    import numpy as np
    import pypdfium2 as pdfium
    from rapidocr import RapidOCR

    dpi = int(os.environ.get("NOTEBOOK_OCR_DPI", "200"))
    max_pixels = int(os.environ.get("NOTEBOOK_OCR_MAX_PIXELS", str(40_000_000)))
    engine = RapidOCR(params={"Global.log_level": "error"})
    pdf = pdfium.PdfDocument(path, password=password or None)
    for number in pages:
        page = pdf[number - 1]
        width, height = page.get_size()
        scale = dpi / 72
        # A huge page (or a tiny one declared huge) must not become a huge bitmap.
        if width * height * scale * scale > max_pixels:
            scale = (max_pixels / (width * height)) ** 0.5
        image = page.render(scale=scale).to_numpy()
        result = engine(np.ascontiguousarray(image[:, :, :3]))
        _emit({"page": number, "text": ocr_text(result)})


def _open_image(path: str) -> Any:
    """The image at `path` (its first frame), upright, as RGB or RGBA; refused above the
    pixel cap from its header, before anything is decoded."""
    # Pillow only in the OCR child
    from PIL import Image, ImageOps

    max_pixels = int(os.environ.get("NOTEBOOK_IMAGE_MAX_PIXELS", str(40_000_000)))
    Image.MAX_IMAGE_PIXELS = max_pixels
    image: Image.Image = Image.open(path, formats=["JPEG", "PNG", "GIF", "WEBP"])
    if image.width * image.height > max_pixels:
        raise ValueError(f"the image has more than {max_pixels:,} pixels")
    image = ImageOps.exif_transpose(image)
    has_alpha = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
    return image.convert("RGBA" if has_alpha else "RGB")


def run_ocr_image(path: str) -> None:
    # OCR's libraries (RapidOCR's ONNX models, ~0.9 GB resident) only in the OCR child
    import numpy as np
    from PIL import Image
    from rapidocr import RapidOCR

    image = _open_image(path)
    if image.mode == "RGBA":  # text on a transparent background: read it on white
        background = Image.new("RGB", image.size, "white")
        background.paste(image, mask=image.getchannel("A"))
        image = background
    engine = RapidOCR(params={"Global.log_level": "error"})
    result = engine(np.ascontiguousarray(np.asarray(image)))
    _emit({"page": 1, "text": ocr_text(result)})


def run_thumbnail(kind: str, path: str, password: str, out: str) -> None:
    """Write a WebP thumbnail of the image or of the PDF's first page, fitting a square of
    NOTEBOOK_THUMBNAIL_SIZE pixels, to `out` (through a temporary file, then renamed)."""
    size = int(os.environ.get("NOTEBOOK_THUMBNAIL_SIZE", "320"))
    if kind == "image":
        image = _open_image(path)
    else:
        # PDFium only in the children that read or render pages
        import pypdfium2 as pdfium

        pdf = pdfium.PdfDocument(path, password=password or None)
        page = pdf[0]
        width, height = page.get_size()
        scale = min(4.0, max(0.01, size / max(width, height, 1.0)))
        image = page.render(scale=scale).to_pil().convert("RGB")
    image.thumbnail((size, size))
    partial = out + ".part"
    image.save(partial, format="WEBP", quality=80)
    os.replace(partial, out)
    _emit({"thumbnail": out, "width": image.width, "height": image.height})


# How native code reports a failed allocation under the address-space cap: loading a compiled
# module (mmap), C++ (onnxruntime's std::bad_alloc), numpy, PDFium.
_OUT_OF_MEMORY = (
    "bad_alloc",
    "cannot allocate memory",
    "failed to map segment",
    "out of memory",
    "unable to allocate",
)


def _out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    text = f"{exc} {exc.__cause__ or ''}".lower()
    return any(sign in text for sign in _OUT_OF_MEMORY)


def main(argv: list[str]) -> int:
    _limit_memory()
    try:
        return _main(argv)
    except (MemoryError, ImportError, OSError) as exc:  # also while importing, under a low cap
        if _out_of_memory(exc):
            return EXIT_MEMORY
        raise


def _main(argv: list[str]) -> int:
    mode, path = argv[1], argv[2]
    thumbnail = mode.startswith("thumb-")
    pages = _parse_pages(argv[3]) if len(argv) > 3 and not thumbnail else []
    # pdfminer: the text child's library, not loaded by the OCR child
    from pdfminer.pdfdocument import PDFPasswordIncorrect

    if mode == "text":
        import pdfminer.converter
        import pdfminer.pdfinterp  # noqa: F401  (imported before we wait: a warm child)
    elif mode == "fast":
        import pypdfium2  # noqa: F401  (imported before we wait: a warm child)
    if path == "-":
        # A standby child: started ahead of time, it learns its file when a job arrives.
        path = sys.stdin.readline().rstrip("\n")
        if not path:
            return 0
    max_pages = int(sys.stdin.readline() or 0) if mode == "text" else 0
    first, step = (int(n) for n in sys.stdin.readline().split()) if mode == "fast" else (1, 1)
    password = sys.stdin.readline().rstrip("\n")

    try:
        if mode == "text":
            run_text(path, password, max_pages)
        elif mode == "fast":
            run_fast(path, password, first, step)
        elif mode == "ocr":
            run_ocr(path, password, pages)
        elif mode == "image":
            run_ocr_image(path)
        elif thumbnail:
            run_thumbnail(mode.removeprefix("thumb-"), path, password, argv[3])
        else:
            raise SystemExit(f"unknown mode {mode}")
    except PDFPasswordIncorrect:
        _emit({"error": "password"})
        return EXIT_PASSWORD
    except RecursionError:
        message = "its structure is nested too deeply or refers to itself"
        _emit({"error": "damaged", "message": message})
        return EXIT_DAMAGED
    except Exception as exc:  # any other parser failure on untrusted input is "damaged"
        if _out_of_memory(exc):
            _emit({"error": "memory"})
            return EXIT_MEMORY
        message = str(exc) or type(exc).__name__
        if "password" in message.lower() and mode in ("ocr", "fast", "thumb-pdf"):
            _emit({"error": "password"})
            return EXIT_PASSWORD
        _emit({"error": "damaged", "message": f"{type(exc).__name__}: {message}"[:300]})
        return EXIT_DAMAGED
    return 0


if __name__ == "__main__":
    sys.setrecursionlimit(5000)
    sys.exit(main(sys.argv))
