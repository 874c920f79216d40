"""The bundled model on ONNX Runtime (core/onnx_embedder.py): the same vectors as
sentence-transformers, its export cached under EMBEDDING_CACHE_DIR (DATA_DIR/models) and reused,
a damaged cache file made again, and EMBEDDING_RUNTIME choosing the runtime."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from attachments.chunking import chunk_pages
from attachments.pdf.extract import extract_text
from core import embeddings, onnx_embedder
from core.embeddings import LocalEmbedder
from core.onnx_embedder import OnnxEmbedder
from tests.fixtures.documents import EVAL_PDFS


def _onnx(quantize: bool = False) -> OnnxEmbedder:
    return OnnxEmbedder(384, quantize=quantize, model_name=embeddings.DEFAULT_LOCAL_MODEL)


@pytest.fixture(scope="module")
def fp32() -> OnnxEmbedder:
    """The configured cache's fp32 model (the default): exported there once (about a minute)
    if missing, as the first embedding of any test run would."""
    return _onnx()


@pytest.fixture(scope="module")
def int8() -> OnnxEmbedder:
    return _onnx(quantize=True)


@pytest.fixture(scope="module")
def torch_embedder() -> LocalEmbedder:
    return LocalEmbedder("", 384)


@pytest.fixture(scope="module")
def passages() -> list[tuple[str, list[str]]]:
    pages = extract_text(EVAL_PDFS / "R-intro.pdf", processes=1).pages[10:22]
    return [(c.content, c.heading_path) for c in chunk_pages(pages)]


@pytest.mark.eval  # fidelity measured on real text: passages of R-intro.pdf
@pytest.mark.parametrize(
    ("runtime", "least", "mean"),
    # Measured on 221 windows of the eval PDFs: fp32 1.0000 (min and mean); int8 min 0.987,
    # mean 0.9965.
    [("fp32", 0.9999, 0.9999), ("int8", 0.98, 0.99)],
)
def test_vectors_are_sentence_transformers_vectors(
    request, runtime, least, mean, torch_embedder, passages
):
    onnx = request.getfixturevalue(runtime)
    windows = [torch_embedder.windows(t, prefix=" › ".join(h)) for t, h in passages]
    assert windows == [onnx.windows(t, prefix=" › ".join(h)) for t, h in passages]
    texts = [w for ws in windows for w in ws]
    assert len(texts) > len(passages) > 10  # long passages give several windows
    reference = np.array(torch_embedder.embed(texts))
    ours = np.array(onnx.embed(texts))
    cosines = (reference * ours).sum(axis=1)
    assert cosines.min() >= least
    assert cosines.mean() >= mean
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-4)
    # A search's query: one short text, no padding of its own.
    (query,) = onnx.embed(["How do I read a data frame from a file?"])
    (expected,) = torch_embedder.embed(["How do I read a data frame from a file?"])
    assert float(np.dot(query, expected)) >= least


def test_the_export_is_cached_and_reused(fp32, settings, monkeypatch):
    assert settings.EMBEDDING_CACHE_DIR == settings.DATA_DIR / "models"  # the default
    assert fp32.path.parent == Path(settings.EMBEDDING_CACHE_DIR)
    assert fp32.path.is_file()
    assert fp32.path.stat().st_size > 10_000_000

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_embedder, "_export_in_child", no_export)
    again = _onnx()
    assert again.path == fp32.path
    assert again.embed(["a sentence"]) == fp32.embed(["a sentence"])
    # fp32 and int8 are different files.
    assert onnx_embedder.cache_path(True) != fp32.path


def _copying_export(source: Path, calls: list[Path], delay: float = 0.0):
    def export(model_dir: Path, target: Path, *, quantize: bool) -> None:
        calls.append(target)
        time.sleep(delay)  # a slow fake export (what the test is about), no wait
        shutil.copyfile(source, target)

    return export


def test_the_export_runs_in_a_child_process_and_its_failure_is_reported(tmp_path):
    """The export imports torch: it runs in a child, so no server keeps torch for its life;
    a child that fails is reported with the end of what it said."""
    with pytest.raises(RuntimeError, match="Exporting the embedding model failed: "):
        onnx_embedder._export_in_child(tmp_path / "no-model", tmp_path / "x.onnx", quantize=False)
    assert not (tmp_path / "x.onnx").exists()


def test_a_damaged_cache_file_is_made_again(fp32, settings, tmp_path, monkeypatch):
    settings.EMBEDDING_CACHE_DIR = tmp_path
    path = onnx_embedder.cache_path(False)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(fp32.path.read_bytes()[:50_000])  # cut short, as by a full disk
    calls: list[Path] = []
    monkeypatch.setattr(onnx_embedder, "_export_in_child", _copying_export(fp32.path, calls))
    rebuilt = _onnx()
    assert len(calls) == 1
    assert calls[0].parent == tmp_path
    assert rebuilt.path == path
    assert path.stat().st_size == fp32.path.stat().st_size
    assert rebuilt.embed(["a sentence"]) == fp32.embed(["a sentence"])
    assert [p.name for p in tmp_path.iterdir() if p.suffix not in (".onnx", ".lock")] == []


def test_exports_at_once_wait_for_each_other(fp32, settings, tmp_path, monkeypatch):
    settings.EMBEDDING_CACHE_DIR = tmp_path
    calls: list[Path] = []
    monkeypatch.setattr(
        onnx_embedder, "_export_in_child", _copying_export(fp32.path, calls, delay=0.5)
    )
    made: list[OnnxEmbedder] = []
    threads = [threading.Thread(target=lambda: made.append(_onnx())) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(made) == 2
    assert len(calls) == 1


def test_the_setting_chooses_the_runtime(fp32, int8, settings):
    settings.EMBEDDING_BACKEND, settings.EMBEDDING_MODEL = "local", ""
    assert embeddings.local_runtime() == "onnx"  # the default
    assert isinstance(embeddings.get_embedder(), OnnxEmbedder)
    assert embeddings.get_embedder().quantize is False  # type: ignore[attr-defined]
    settings.EMBEDDING_QUANTIZE = True
    assert embeddings.local_runtime() == "onnx-int8"
    assert embeddings.get_embedder().quantize is True  # type: ignore[attr-defined]
    settings.EMBEDDING_RUNTIME = "torch"
    assert isinstance(embeddings.get_embedder(), LocalEmbedder)
    # Both runtimes record the same model name: stored vectors stay valid across a switch.
    assert embeddings.embedding_model_name() == embeddings.DEFAULT_LOCAL_MODEL
