"""The bundled model on ONNX Runtime (notebook/onnx_embedder.py): the same vectors as
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
from notebook import embeddings, onnx_embedder
from notebook.embeddings import LocalEmbedder
from notebook.onnx_embedder import OnnxEmbedder
from tests.conftest import EVAL_PDFS


def _onnx(quantize: bool = True) -> OnnxEmbedder:
    return OnnxEmbedder(384, quantize=quantize, model_name=embeddings.DEFAULT_LOCAL_MODEL)


@pytest.fixture(scope="module")
def int8() -> OnnxEmbedder:
    """The configured cache's int8 model: exported there once (about a minute) if missing,
    as the first embedding of any test run would."""
    return _onnx()


@pytest.fixture(scope="module")
def torch_embedder() -> LocalEmbedder:
    return LocalEmbedder("", 384)


@pytest.fixture(scope="module")
def passages() -> list[tuple[str, list[str]]]:
    pages = extract_text(EVAL_PDFS / "R-intro.pdf", processes=1).pages[10:22]
    return [(c.content, c.heading_path) for c in chunk_pages(pages)]


def test_int8_vectors_are_sentence_transformers_vectors(int8, torch_embedder, passages):
    windows = [torch_embedder.windows(t, prefix=" › ".join(h)) for t, h in passages]
    assert windows == [int8.windows(t, prefix=" › ".join(h)) for t, h in passages]
    texts = [w for ws in windows for w in ws]
    assert len(texts) > len(passages) > 10  # long passages give several windows
    reference = np.array(torch_embedder.embed(texts))
    ours = np.array(int8.embed(texts))
    cosines = (reference * ours).sum(axis=1)
    # Measured on 193 windows of the eval PDFs: min 0.991, mean 0.997.
    assert cosines.min() >= 0.98
    assert cosines.mean() >= 0.99
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-4)
    # A search's query: one short text, no padding of its own.
    (query,) = int8.embed(["How do I read a data frame from a file?"])
    (expected,) = torch_embedder.embed(["How do I read a data frame from a file?"])
    assert float(np.dot(query, expected)) >= 0.98


def test_the_export_is_cached_and_reused(int8, settings, monkeypatch):
    assert settings.EMBEDDING_CACHE_DIR == settings.DATA_DIR / "models"  # the default
    assert int8.path.parent == Path(settings.EMBEDDING_CACHE_DIR)
    assert int8.path.is_file()
    assert int8.path.stat().st_size > 10_000_000

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_embedder, "export", no_export)
    again = _onnx()
    assert again.path == int8.path
    assert again.embed(["a sentence"]) == int8.embed(["a sentence"])
    # fp32 and int8 are different files.
    assert onnx_embedder.cache_path(False) != int8.path


def _copying_export(source: Path, calls: list[Path], delay: float = 0.0):
    def export(model_dir: Path, target: Path, *, quantize: bool) -> None:
        calls.append(target)
        time.sleep(delay)
        shutil.copyfile(source, target)

    return export


def test_a_damaged_cache_file_is_made_again(int8, settings, tmp_path, monkeypatch):
    settings.EMBEDDING_CACHE_DIR = tmp_path
    path = onnx_embedder.cache_path(True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(int8.path.read_bytes()[:50_000])  # cut short, as by a full disk
    calls: list[Path] = []
    monkeypatch.setattr(onnx_embedder, "export", _copying_export(int8.path, calls))
    rebuilt = _onnx()
    assert len(calls) == 1
    assert calls[0].parent == tmp_path
    assert rebuilt.path == path
    assert path.stat().st_size == int8.path.stat().st_size
    assert rebuilt.embed(["a sentence"]) == int8.embed(["a sentence"])
    assert [p.name for p in tmp_path.iterdir() if p.suffix not in (".onnx", ".lock")] == []


def test_exports_at_once_wait_for_each_other(int8, settings, tmp_path, monkeypatch):
    settings.EMBEDDING_CACHE_DIR = tmp_path
    calls: list[Path] = []
    monkeypatch.setattr(onnx_embedder, "export", _copying_export(int8.path, calls, delay=0.5))
    made: list[OnnxEmbedder] = []
    threads = [threading.Thread(target=lambda: made.append(_onnx())) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(made) == 2
    assert len(calls) == 1


def test_the_setting_chooses_the_runtime(int8, settings):
    settings.EMBEDDING_BACKEND, settings.EMBEDDING_MODEL = "local", ""
    settings.EMBEDDING_RUNTIME, settings.EMBEDDING_QUANTIZE = "onnx", True
    assert embeddings.local_runtime() == "onnx-int8"
    assert isinstance(embeddings.get_embedder(), OnnxEmbedder)
    assert embeddings.get_embedder().quantize is True
    settings.EMBEDDING_RUNTIME = "torch"
    assert isinstance(embeddings.get_embedder(), LocalEmbedder)
    settings.EMBEDDING_RUNTIME, settings.EMBEDDING_QUANTIZE = "onnx", False
    assert embeddings.local_runtime() == "onnx"
    # Both runtimes record the same model name: stored vectors stay valid across a switch.
    assert embeddings.embedding_model_name() == embeddings.DEFAULT_LOCAL_MODEL
