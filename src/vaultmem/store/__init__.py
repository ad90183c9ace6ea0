"""The store room: the database (bundled or external), its schema and migrations, and every
read and write of vaultmem's tables.

Front door: `from vaultmem import store` then `store.upsert_note(...)`, `store.state(...)`. The
table functions live by concern (`tables`: the index's writes and the ingester's reads; `audit`:
the review tables; `notes`: what readers ask of indexed notes) and are all re-exported here;
`store.db` connects, applies the schema and registers vaults, `store.server` runs the bundled
PostgreSQL, `store.schema_lock` keeps schema upgrades and index writes apart (every write
goes through `store.write_transaction`). For many machines and people: `store.vault_lease` (one
writer per vault, held by the database), `store.claims` (the embedding backlog as work any
worker can claim), `store.vector_cache` (the shared vectors, by model and text),
`store.agnostic_vectors` (the second opinion's vectors on the chunk rows),
`store.worker_registry` (the embedding workers' rows) and `store.access` (grants on shared
vaults, who reads what).
"""

from .audit import *  # noqa: F403
from .notes import *  # noqa: F403
from .schema_lock import write_transaction as write_transaction
from .tables import *  # noqa: F403
