"""The named errors vaultmem reports to users.

Library code raises these; the CLI turns each into one plain line on stderr (with the next step)
and a meaningful exit code, so expected failures never show a traceback.
"""

from __future__ import annotations


class VaultmemError(Exception):
    """Base class for errors vaultmem reports to the user."""

    exit_code = 1
    # True when the command has already printed everything the user needs (verify's report of
    # the drift): the CLI then adds no error line and only exits with `exit_code`.
    reported = False


class ConfigError(VaultmemError):
    """A setting has a value vaultmem cannot use."""

    exit_code = 2


class SymlinkRefused(ConfigError):
    """A file vaultmem reads or writes for the user (Claude Code's settings, ~/.claude.json, the
    registry, the injection log, the vault's state files) is a symbolic link: it is never
    followed (the trust boundary), and the message says what to do instead."""


class NotAGitRepo(VaultmemError):
    """The vault path is not inside a git repository."""

    exit_code = 3


class DatabaseUnavailable(VaultmemError):
    """The database cannot be reached or started."""

    exit_code = 4


class RoleError(VaultmemError):
    """The database role lacks what the command needs (not a member of vaultmem_member, may
    not create the schema): one sentence naming the GRANT that fixes it."""

    exit_code = 12


class SchemaError(VaultmemError):
    """The database schema is missing or newer than this vaultmem understands."""

    exit_code = 5


class EmbeddingError(VaultmemError):
    """The embedding provider failed in a way retrying will not fix (or retries ran out)."""

    exit_code = 6


class GitError(VaultmemError):
    """A git command failed."""

    exit_code = 7


class BlobMissing(GitError):
    """A blob the tree names is not in the repository (a partial clone, a damaged pack)."""


class DriftDetected(VaultmemError):
    """`verify` found the index differs from the committed notes (its report says where)."""

    exit_code = 8
    reported = True


class ClaudeFailed(VaultmemError):
    """`vaultmem distill`: the user's `claude -p` failed (missing, non-zero exit, timeout,
    output that is not the notes asked for). Nothing leaves the queue."""

    exit_code = 11


class AuditPathError(VaultmemError):
    """`vaultmem audit` got a path it cannot act on (not quarantined, not allowed, not at HEAD)."""


class ConfirmationRequired(VaultmemError):
    """An action needs the user's explicit yes (`audit allow` of a file holding a credential)."""

    def __init__(self, message: str, rules: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.rules = rules
