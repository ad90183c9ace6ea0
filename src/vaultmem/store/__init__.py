"""The store room: the database (bundled or external), its schema and migrations, and every
read and write of vaultmem's tables.

Front door: `from vaultmem import store` then `store.connect(...)`, `store.upsert_note(...)`.
"""

from .tables import *  # noqa: F403
