"""Hostile and broken PDFs, uploaded through the real service and read by a real worker: each
ends with a reason a user can read, within the limits, run once, while the worker stays up and
another user's file is read normally. The files are built here, small on disk."""

from __future__ import annotations

import zlib

import pytest
from django.core.exceptions import ValidationError
from django_q.models import OrmQ, Task
from django_q.tasks import async_task, result

from attachments import services
from attachments.models import NoteAttachment
from core.fencing import reap
from core.jobs import TICKET
from core.models import Job
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.documents import CATALOG, one_page, pdf, stream, upload
from tests.fixtures.waiting import wait_until
from tests.workers import run_worker

# --- A minimal PDF writer: objects numbered from 1 (1 is the catalog, 2 the root /Pages).

INGEST = "attachments.tasks.ingest_attachment"
FONT = b"<< /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >>"
FORM = b"/Type /XObject /Subtype /Form /BBox [0 0 612 792]"


def text(words: str) -> bytes:
    return b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % words.encode()


def zeros_deflated(total: int, chunk: int) -> bytes:
    """A zlib stream of `total` zero bytes, made without compressing them all: after a full
    flush the compressor restarts, so every further chunk compresses to the same bytes."""
    assert total % chunk == 0
    compressor = zlib.compressobj(9)
    zero = bytes(chunk)
    first = compressor.compress(zero) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeat = compressor.compress(zero) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush(zlib.Z_FINISH)[:-4]  # without the checksum of two chunks
    adler32 = ((total % 65521) << 16) | 1  # Adler-32 of `total` zeros
    return first + repeat * (total // chunk - 1) + end + adler32.to_bytes(4, "big")


def flate_bomb() -> bytes:
    """A content stream of 4 GiB of zeros behind three Flate layers: under 1 KB on disk."""
    data = zeros_deflated(4 << 30, 1 << 24)
    for _ in range(2):
        data = zlib.compress(data, 9)
    filters = b"/Filter [/FlateDecode /FlateDecode /FlateDecode]"
    return pdf(*one_page(4, FONT), stream(data, filters))


def cyclic_forms() -> bytes:
    """Form A draws B, which draws A again (and some text each)."""
    form = FORM + b" /Resources << /XObject << /X %d 0 R >> /Font << /F1 7 0 R >> >>"
    return pdf(
        *one_page(4, b"<< /XObject << /A 5 0 R >> >>"),
        stream(b"q /A Do Q"),
        stream(text("Drawn by form A") + b" /X Do", form % 6),
        stream(b"/X Do " + text("Drawn by form B"), form % 5),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    )


def exponential_forms(depth: int = 40) -> bytes:
    """No cycle, but each form draws the next one twice: 2^40 drawings."""
    objects = [*one_page(4, b"<< /XObject << /X 5 0 R >> >>"), stream(b"q /X Do Q")]
    for number in range(5, 5 + depth):
        resources = b" /Resources << /XObject << /X %d 0 R >> >>" % (number + 1)
        objects.append(stream(b"/X Do /X Do", FORM + resources))
    objects.append(stream(text("leaf"), FORM + b" /Resources " + FONT))
    return pdf(*objects)


def self_referencing_page_tree() -> bytes:
    return pdf(CATALOG, b"<< /Type /Pages /Kids [2 0 R] /Count 10 >>")


def many_pages(count: int = 10_000) -> bytes:
    kids = b" ".join(b"%d 0 R" % (4 + i) for i in range(count))
    return pdf(
        CATALOG,
        b"<< /Type /Pages /Kids [%s] /Count %d /MediaBox [0 0 612 792] /Resources %s >>"
        % (kids, count, FONT),
        stream(text("One of very many pages.")),
        *[b"<< /Type /Page /Parent 2 0 R /Contents 3 0 R >>"] * count,
    )


def huge_image(side: int = 30_000) -> bytes:
    """A page that is only a 30,000 × 30,000 grey image (900 MB decoded, 2 KB on disk)."""
    data = zlib.compress(zeros_deflated(side * side, side * 1000), 9)
    image = b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray " % (
        side,
        side,
    )
    image += b"/BitsPerComponent 8 /Filter [/FlateDecode /FlateDecode]"
    return pdf(
        *one_page(4, b"<< /XObject << /Im 5 0 R >> >>"),
        stream(b"q 612 0 0 792 0 0 cm /Im Do Q"),
        stream(data, image),
    )


# --- The worker's limits, small so that the test is quick (the worker reads its environment).
# The time limit comes well before exponential.pdf's reader fills 256 MB (about 8 s on an idle
# machine, later on a slower or busier one): at 10 s which limit came first depended on the
# machine's speed.
LIMITS = {
    "EXTRACT_TIMEOUT": "5",
    "EXTRACT_MEMORY_MB": "256",
    "MAX_PDF_PAGES": "2000",
    "TASK_TIMEOUT": "60",
    "WORKERS": "2",
}
# What each file's error must say: the limit hit, in the user's terms.
FAILURES = {
    "bomb.pdf": "needed more than 256 MB of memory",
    "exponential.pdf": "took longer than 5 seconds",
    "self-pages.pdf": "list of pages is empty or damaged",
    "many-pages.pdf": "The PDF has 10,000 pages; the limit is 2,000.",
    "huge-image.pdf": "Page 1 was not read by OCR because an image on it has 900 megapixels; "
    "the limit is 150 megapixels.",
    "broken.pdf": "The file is damaged or incomplete",
}


def wait_until_settled(attachments: list[NoteAttachment], timeout: float) -> None:
    pks = [a.pk for a in attachments]
    active = (NoteAttachment.Status.PENDING, NoteAttachment.Status.PROCESSING)
    wait_until(
        lambda: not NoteAttachment.objects.filter(pk__in=pks, status__in=active).exists(),
        timeout, interval=0.2,
        message=lambda: "not settled: " + str(list(NoteAttachment.objects.filter(
            pk__in=pks).values_list("original_name", "status", "stage"))),
    )  # fmt: skip
    for attachment in attachments:
        attachment.refresh_from_db()


def wait_for_empty_queue(timeout: float = 15) -> None:
    """The monitor acknowledges a task (deletes its queue row) just after saving its result."""
    wait_until(
        lambda: not OrmQ.objects.exists(), timeout, interval=0.2,
        message="tasks are still queued (would be delivered again)",
    )  # fmt: skip


@pytest.fixture
def note(alice):
    return NoteFactory.create(notebook=NotebookFactory.create(owner=alice))


@pytest.mark.django_db
def test_upload_refuses_a_pdf_over_the_page_limit(alice, note):
    with pytest.raises(ValidationError, match="has 10,000 pages; the limit is 2,000"):
        upload(alice, note, "many-pages.pdf", many_pages())
    assert not NoteAttachment.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_hostile_pdfs_fail_with_a_reason_once_and_spare_the_worker_and_other_users(
    alice, note, bob, bob_note, settings, tmp_path
):
    files = {
        "bomb.pdf": flate_bomb(),
        "cyclic.pdf": cyclic_forms(),
        "exponential.pdf": exponential_forms(),
        "self-pages.pdf": self_referencing_page_tree(),
        "many-pages.pdf": many_pages(),
        "huge-image.pdf": huge_image(),
        "broken.pdf": None,
    }
    assert all(len(data) < 1_000_000 for data in files.values() if data)
    # Counted at upload under a higher limit (or not countable there): the worker's count
    # decides.
    settings.MAX_PDF_PAGES = 10_000
    hostile = {name: upload(alice, note, name, data) for name, data in files.items()}
    normal = upload(bob, bob_note, "text.pdf")  # queued among them, read by the other worker
    log = tmp_path / "worker.log"
    with run_worker(log, **LIMITS) as worker:
        wait_until_settled([*hostile.values(), normal], timeout=90)
        wait_for_empty_queue()
        worker.check_alive()

    failed = {name: a.error for name, a in hostile.items() if a.status == "failed"}
    assert failed.keys() == FAILURES.keys(), {n: (a.status, a.error) for n, a in hostile.items()}
    for name, reason in FAILURES.items():
        assert reason in failed[name], (name, failed[name])
    assert hostile["huge-image.pdf"].ocr_pages == 0  # never rendered
    # pdfminer stops at the cycle: each form's text once, and the file is usable.
    cyclic = hostile["cyclic.pdf"]
    assert cyclic.status == "ready", cyclic.error
    text = cyclic.pages.get().text
    assert text.count("Drawn by form A") == 1
    assert text.count("Drawn by form B") == 1
    assert normal.status == "ready", normal.error
    assert normal.chunks.exists()

    # Each file was run once: one claim, one job run once, every ticket delivered once,
    # nothing left to redeliver.
    for name, attachment in hostile.items():
        assert attachment.attempts == 1, name
        (job,) = Job.objects.filter(func=INGEST, args=[attachment.pk])
        assert (job.state in {"done", "failed"}, job.attempts) == (True, 1), (name, job.error)
    tickets = Task.objects.filter(func=TICKET)
    assert set(tickets.values_list("attempt_count", flat=True)) == {1}
    # The reaper leaves finished files alone, however old.
    settings.INGEST_STALE_SECONDS = 0
    assert reap(services.INGESTION) == 0
    assert "reincarnated" not in log.read_text(), worker.tail()  # no worker process died


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_past_the_task_timeout_fails_once_and_the_worker_goes_on(alice, note, tmp_path):
    """A parse slower than TASK_TIMEOUT (EXTRACT_TIMEOUT set above it): django-q's alarm ends
    the run, the file fails with the limit named instead of being run again by the reaper."""
    slow = upload(alice, note, "exponential.pdf", exponential_forms())
    log = tmp_path / "worker.log"
    with run_worker(log, TASK_TIMEOUT="10", EXTRACT_TIMEOUT="120") as worker:
        wait_until_settled([slow], timeout=60)
        wait_for_empty_queue()
        # The worker process that timed out is replaced, and the next task runs.
        assert result(async_task("math.factorial", 5), wait=30_000) == 120
        worker.check_alive()
    assert slow.status == "failed"
    assert "Processing took longer than 10 seconds, the limit" in slow.error
    assert slow.attempts == 1
    (job,) = Job.objects.filter(func=INGEST, args=[slow.pk])
    assert (job.state, job.attempts) == ("failed", 1)
    assert "longer than 10 seconds" in job.error
    (ticket,) = [t for t in Task.objects.filter(func=TICKET) if t.args == (job.pk,)]
    assert (ticket.attempt_count, ticket.success) == (1, False)  # ended by the timeout
    assert "reincarnated worker" in log.read_text()
