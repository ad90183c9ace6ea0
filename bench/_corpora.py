"""Benchmark vaults that survive between runs, so nothing is embedded twice.

A bench vault is a real git repository under VAULTMEM_BENCH_DIR (default
/tmp/vaultmem-bench-vaults/NAME) indexed by the real catch-up. It is rebuilt only when the
files it should hold change; otherwise the registered vault (and its vectors) is reused. With a
persistent VAULTMEM_HOME (or VAULTMEM_DATABASE_URL) the embedding cache outlives the vaults
too, so a rebuilt vault with the same chunks costs no model call.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def bench_dir() -> Path:
    return Path(os.environ.get("VAULTMEM_BENCH_DIR", "/tmp/vaultmem-bench-vaults"))


def _digest(files: Mapping[str, str]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + files[path].encode() + b"\0")
    return h.hexdigest()


def bench_vault(name: str, files: Mapping[str, str], *, embed: bool = True) -> tuple[Path, Any]:
    """The vault NAME holding exactly `files` (path -> text), indexed; (root, settings).

    Needs the environment from `_setup.bench_env` (provider, git identity, VAULTMEM_HOME)."""
    from vaultmem.config import load_settings
    from vaultmem.index import ingest
    from vaultmem.store import db

    root = bench_dir() / name
    mark = root / ".git" / "vaultmem-bench.json"
    digest = _digest(files)
    fresh = not (mark.is_file() and json.loads(mark.read_text())["digest"] == digest)
    if fresh:
        if root.exists():
            _forget(root)
            shutil.rmtree(root)
        root.mkdir(parents=True)
        root.chmod(0o755)
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        for path, text in files.items():
            p = root / path
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        subprocess.run(["git", "add", "-A"], cwd=root, check=True)
        subprocess.run(["git", "commit", "-qm", "bench corpus"], cwd=root, check=True)
        mark.write_text(json.dumps({"digest": digest}))
    settings = load_settings(root)
    with db.connect(settings, start=True) as conn:
        db.apply_schema(conn)
        registered = db.find_vault(conn, root) is not None
    if fresh or not registered or embed:
        result = ingest.catch_up(settings, root, wait=True, embed=embed)
        assert result is not None and (not embed or result.backlog == 0), result
    return root, settings


def _forget(root: Path) -> None:
    """Drop an outdated bench vault's rows (its vectors stay in the embedding cache)."""
    from vaultmem.config import load_settings
    from vaultmem.store import db

    settings = load_settings(root)
    with db.connect(settings, start=True) as conn:
        conn.execute("DELETE FROM vaults WHERE root = %s", (str(root.resolve()),))
        conn.commit()
