"""What a git hook runs (`vaultmem ingest --from-hook`): catch the vault up, log one line, never
fail.

Design decision: the commit has already happened when the hook runs, so nothing here may fail
it or print a traceback into the user's git output. Every outcome is one line in the vault's
hook log under .git (`statedir.log_line`), which `vaultmem status` shows; only when even the log
cannot be found (the folder is not a repository) does one line go to stderr.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import vaults
from ..config import load_settings
from ..dburl import redact_url
from ..errors import VaultmemError
from ..terminal import clean
from .gitdiff import repo_root
from .ingest import catch_up
from .statedir import StateFiles, log_line, state_files


def run_from_git_hook(vault: str | None, config_file: Path | None) -> None:
    """Index the hook's repository (`vault`, else the current directory) up to HEAD.

    Only a registered vault is indexed, into the index recorded when it was registered (the
    hook names the user's config file, `config_file`, so a GUI client or `env -i` finds it); a
    hook never starts a bundled server of its own choosing. Returns normally whatever happens
    (KeyboardInterrupt aside)."""
    files: StateFiles | None = None
    try:
        # The hook's own repository, never VAULTMEM_VAULT: that names the vault the agent
        # wrapper reads, and every repository with hooks must index itself.
        root = repo_root(Path(vault) if vault else Path.cwd())
        files = state_files(root)
        environ = dict(os.environ)
        if config_file is not None:
            environ[vaults.CONFIG_ENV] = str(config_file)
        user = vaults.load(environ)
        if user.by_path(root) is None:
            log_line(
                files,
                f"error: {root} is not a registered vault ({user.path}), so the commit was not "
                "indexed: run `vaultmem init` in it",
            )
            return
        settings = load_settings(root, environ, user=user)
        # Start a bundled server that is merely down (e.g. after a reboot), but never one the
        # user stopped with `vaultmem db stop`: that is logged instead, and caught up later.
        result = catch_up(settings, root, background=True)
        if result is not None:
            log_line(files, f"ok {result.mode} {result.to_commit or ''} {result.summary()}")
    except VaultmemError as exc:
        if files is not None:
            log_line(files, f"error: {exc}")
        else:
            # As the CLI reports errors: one clean line, any database password hidden.
            print(clean(redact_url(f"vaultmem: {exc}")), file=sys.stderr)
    except Exception as exc:  # a hook must never surface a traceback to git
        if files is not None:
            log_line(
                files,
                f"error: unexpected {type(exc).__name__}: {exc}; "
                "run `vaultmem ingest` to see details",
            )
