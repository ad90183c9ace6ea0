"""`vaultmem worker`: drain the embedding backlog of every vault this role may write, from any
machine that reaches the server.

Design decisions:
- A worker is the ingester's own drain (`backlog.embed_claimed`) run in a loop over all vaults:
  it claims a batch (`store.claims`: row locks taken with FOR UPDATE SKIP LOCKED, held by the
  batch's transaction), embeds the texts no one has embedded yet with each vault's model (the
  model id its index records, `embed.embedder_for_model`), writes the vectors to the shared
  cache and the chunks, and commits, which releases the claims. A worker killed mid-batch
  leaves nothing behind: its transaction rolls back when its connection goes, and its chunks
  are in the backlog again for the others. Vectors go through the shared cache
  (`store.vector_cache`).
- Any number of workers, on any machine: nothing coordinates them but the claims, so adding a
  faster machine (a GPU box, a CI runner) is starting one more process.
- Each worker has a row in `embedding_workers` (`store.worker_registry`) with its totals
  (what `vaultmem status` shows: who is draining, how fast); it is the only state a worker
  keeps.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import store
from ..config import Settings
from ..embed import Embedder, embedder_for_model
from ..errors import ConfigError
from ..store import claims, db, worker_registry
from .backlog import embed_claimed

# How long an idle worker waits before it looks for work again, and how often the models it
# can serve are re-read (a vault registered meanwhile may want another one).
IDLE_SECONDS = 1.0
UNTIL_EMPTY_POLL = 0.2
MODELS_EVERY = 30.0


@dataclass
class WorkerResult:
    """What a worker did: batches committed, texts embedded, chunks filled from the cache."""

    worker_id: str
    batches: int = 0
    claimed: int = 0
    embedded: int = 0
    reused: int = 0
    filled: int = 0
    seconds: float = 0.0  # time in the model
    elapsed: float = 0.0
    skipped_models: dict[str, str] = field(default_factory=dict)  # model -> why not served

    @property
    def rate(self) -> float | None:
        """Chunks given a vector per second of the worker's run."""
        return self.filled / self.elapsed if self.elapsed > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate": self.rate}


class Worker:
    """One worker over one connection; `run` until stopped (or, with `until_empty`, until no
    chunk it can embed is left)."""

    def __init__(
        self,
        settings: Settings,
        conn: db.Conn,
        *,
        vault_ids: list[int] | None = None,
        batch_size: int | None = None,
        embedder_factory: Callable[[str], Embedder] | None = None,
    ) -> None:
        self.settings = settings
        self.conn = conn
        self.vault_ids = vault_ids
        self.batch_size = max(1, batch_size or settings.embedding_batch_size)
        self._factory = embedder_factory or (lambda m: embedder_for_model(m, settings))
        self._embedders: dict[str, Embedder] = {}
        self.result = WorkerResult(f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
        self._models: list[str] = []
        self._models_at = -MODELS_EVERY

    def embedder_for(self, model_id: str) -> Embedder:
        found = self._embedders.get(model_id)
        if found is None:
            found = self._embedders[model_id] = self._factory(model_id)
        return found

    def models(self) -> list[str]:
        """The models this worker can make that the backlog wants (refreshed now and then)."""
        if time.monotonic() - self._models_at < MODELS_EVERY:
            return self._models
        wanted = claims.backlog_counts(self.conn, self.vault_ids)
        self.conn.commit()
        served = []
        for model_id in sorted(wanted):
            if model_id in self.result.skipped_models:
                continue
            try:
                self.embedder_for(model_id)
            except ConfigError as exc:
                self.result.skipped_models[model_id] = str(exc)
                continue
            served.append(model_id)
        self._models, self._models_at = served, time.monotonic()
        return served

    def left(self) -> int:
        """Chunks still waiting for a model this worker serves (in its vaults)."""
        counts = claims.backlog_counts(self.conn, self.vault_ids)
        self.conn.commit()
        return sum(n for m, n in counts.items() if m in self._models)

    def run(
        self,
        *,
        until_empty: bool = False,
        should_stop: Callable[[], bool] = lambda: False,
        on_batch: Callable[[WorkerResult], None] | None = None,
    ) -> WorkerResult:
        r = self.result
        started = time.monotonic()
        first = self.models()
        with self.conn.transaction():
            worker_registry.register_worker(
                self.conn, r.worker_id, socket.gethostname(), os.getpid(), first
            )
        try:
            while not should_stop():
                models = self.models()
                step = None
                if models:
                    with store.write_transaction(self.conn):
                        step = embed_claimed(
                            self.conn,
                            self.embedder_for,
                            self.batch_size,
                            vault_ids=self.vault_ids,
                            models=models,
                        )
                        if step.claimed:
                            r.batches += 1
                            r.claimed += step.claimed
                            r.embedded += step.embedded
                            r.reused += step.reused
                            r.filled += step.filled
                            r.seconds += step.seconds
                            worker_registry.touch_worker(
                                self.conn,
                                r.worker_id,
                                embedded=r.embedded,
                                reused=r.reused,
                                batches=r.batches,
                                seconds=r.seconds,
                                models=models,
                            )
                r.elapsed = time.monotonic() - started
                if step is not None and step.claimed:
                    if on_batch is not None:
                        on_batch(r)
                    continue
                if until_empty:
                    self._models_at = -MODELS_EVERY  # a new vault's model counts as work left
                    if not self.models() or self.left() == 0:
                        break
                    # What is left is claimed by other workers: it comes back if one of them
                    # dies, so wait for it rather than leave it.
                    time.sleep(UNTIL_EMPTY_POLL)
                else:
                    time.sleep(IDLE_SECONDS)
        finally:
            r.elapsed = time.monotonic() - started
            try:
                self.conn.rollback()
                with self.conn.transaction():
                    worker_registry.stop_worker(self.conn, r.worker_id)
            except Exception:  # noqa: BLE001 - the row is only for `status`; the server may be gone
                pass
        return r
