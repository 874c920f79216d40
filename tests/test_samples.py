"""The committed samples (tests/samples/) are what tests/samples/make_samples.py makes."""

from __future__ import annotations

import importlib.util
import io

import pikepdf

from tests.fixtures.documents import SAMPLE_PASSWORD, SAMPLES


def _made() -> dict[str, bytes]:
    spec = importlib.util.spec_from_file_location("make_samples", SAMPLES / "make_samples.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made: dict[str, bytes] = module.samples()
    return made


def _page_contents(pdf: pikepdf.Pdf) -> list[bytes]:
    return [page.Contents.read_bytes() for page in pdf.pages]


def test_the_script_makes_the_committed_samples():
    made = _made()
    committed = {path.name for path in SAMPLES.iterdir() if path.suffix in {".pdf", ".png"}}
    assert committed == set(made)
    for name, data in made.items():
        if name != "locked.pdf":  # its AES salt differs from run to run
            assert (SAMPLES / name).read_bytes() == data, f"{name}: run make_samples.py"
    with (
        pikepdf.open(SAMPLES / "locked.pdf", password=SAMPLE_PASSWORD) as locked,
        pikepdf.open(io.BytesIO(made["text.pdf"])) as text,
    ):
        assert locked.is_encrypted
        assert _page_contents(locked) == _page_contents(text)


def test_the_samples_stay_small():
    assert all(path.stat().st_size < 64_000 for path in SAMPLES.iterdir())
