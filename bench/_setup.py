"""Shared benchmark set-up: a private work dir, settings for the run, a git identity.

Returns whether the database is external (VAULTMEM_DATABASE_URL set): otherwise the benchmark
owns a bundled server in its work dir and must stop it when done.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@x",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@x",
}


def bench_env(prefix: str, provider: str) -> tuple[Path, bool]:
    """Make a work dir (readable by the server's OS user when run as root) and set the env."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    work.chmod(0o755)
    external = "VAULTMEM_DATABASE_URL" in os.environ
    os.environ.setdefault("VAULTMEM_HOME", str(work / "home"))
    # The registry of vaults belongs to the run, never to the user who runs it.
    os.environ.setdefault("VAULTMEM_CONFIG", str(work / "config.toml"))
    os.environ["VAULTMEM_EMBEDDING_PROVIDER"] = provider
    for k, v in GIT_IDENTITY.items():
        os.environ.setdefault(k, v)
    return work, external
