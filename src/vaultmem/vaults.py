"""The user's registered vaults: the only places memory comes from, and the index each one uses.

Design decision: trust lives in one user-level file that no repository can write,
`$XDG_CONFIG_HOME/vaultmem/config.toml` (default `~/.config/vaultmem/config.toml`; the
`VAULTMEM_CONFIG` variable names another). It lists the registered vaults by name, with the
index each was registered with (a bundled-server home or a database URL), names the default
vault, and may hold user-level settings. Every command that hands notes to an agent (`context`,
`query`, `claude-hook`, the wrapper) reads only vaults listed here, from any directory; every
command and git hook acting on a vault uses the index recorded for it, so a commit made from a
GUI client or `env -i` updates the same index the user queries. Reading uses `tomllib` (the
per-prompt hook reads this file); writing uses `tomlkit`, which keeps the user's own comments.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

CONFIG_ENV = "VAULTMEM_CONFIG"
# The registry is read and written only as a regular file (files.py): for a linked one (a
# dotfiles manager's), the way out is to name the real file.
LINK_ADVICE = f"set {CONFIG_ENV} to the file it points to (or copy that file in its place)"
_NAME_RE = re.compile(r"^[\w.\-]{1,64}$")


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the user's vaultmem configuration lives (it may not exist yet)."""
    env = os.environ if environ is None else environ
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base).expanduser() / "vaultmem" / "config.toml"


@dataclass(frozen=True)
class VaultEntry:
    """One registered vault and the index it was registered with."""

    name: str
    path: Path
    home: Path | None = None  # the bundled server's home, when it uses the bundled database
    database_url: str | None = None  # an external database (takes precedence over `home`)

    def to_dict(self) -> dict[str, Any]:
        from .dburl import redact_url

        return {
            "name": self.name,
            "path": str(self.path),
            "home": str(self.home) if self.home else None,
            "database_url": redact_url(self.database_url) if self.database_url else None,
        }


@dataclass(frozen=True)
class UserConfig:
    """The parsed configuration file: registered vaults, the default, user-level settings."""

    path: Path
    vaults: tuple[VaultEntry, ...] = ()
    default: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str) -> VaultEntry | None:
        return next((v for v in self.vaults if v.name == name), None)

    def by_path(self, path: Path) -> VaultEntry | None:
        """The vault whose root is `path` (symlinks resolved)."""
        try:
            wanted = path.resolve()
        except OSError:
            return None
        return next((v for v in self.vaults if _same(v.path, wanted)), None)

    def containing(self, path: Path) -> VaultEntry | None:
        """The vault that holds `path` (the deepest one, should vaults nest)."""
        try:
            here = path.resolve()
        except OSError:
            return None
        best: VaultEntry | None = None
        for v in self.vaults:
            root = _resolved(v.path)
            if (here == root or root in here.parents) and (
                best is None or len(root.parts) > len(_resolved(best.path).parts)
            ):
                best = v
        return best

    def default_vault(self) -> VaultEntry | None:
        if self.default:
            return self.get(self.default)
        return self.vaults[0] if len(self.vaults) == 1 else None

    def lookup(self, name_or_path: str) -> VaultEntry | None:
        """A vault by its name, or by its root (or a directory inside it)."""
        found = self.get(name_or_path)
        if found is not None:
            return found
        candidate = Path(name_or_path).expanduser()
        return self.containing(candidate) if candidate.exists() else None


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def _same(a: Path, b: Path) -> bool:
    return _resolved(a) == b


def load(environ: Mapping[str, str] | None = None) -> UserConfig:
    """Read the user's configuration; an absent file is an empty configuration.

    A file that cannot be parsed is a ConfigError naming it (never silently "no vaults")."""
    from .files import read_regular

    path = config_path(environ)
    try:
        raw = read_regular(path, advice=LINK_ADVICE)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    if raw is None:
        return UserConfig(path)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}): fix or remove it") from None
    vaults: list[VaultEntry] = []
    table = data.get("vaults", {})
    if not isinstance(table, dict):
        raise ConfigError(f"[vaults] in {path} must be a table of vaults")
    for name, entry in table.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise ConfigError(f'[vaults.{name}] in {path} needs a path = "..."')
        home, url = entry.get("home"), entry.get("database_url")
        vaults.append(
            VaultEntry(
                name=name,
                path=Path(entry["path"]).expanduser(),
                home=Path(home).expanduser() if isinstance(home, str) and home else None,
                database_url=url if isinstance(url, str) and url else None,
            )
        )
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise ConfigError(f'[settings] in {path} must be a table of NAME = "value" pairs')
    default = data.get("default")
    return UserConfig(
        path=path,
        vaults=tuple(vaults),
        default=default if isinstance(default, str) and default else None,
        settings={str(k): str(v) for k, v in settings.items()},
    )


def resolve(
    config: UserConfig,
    name: str | None = None,
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> VaultEntry | None:
    """The vault a reading command uses, or None when none is registered.

    `name` (a --vault NAME or PATH), else VAULTMEM_VAULT, else the registered vault holding
    `cwd`, else the default vault: the one precedence every reader uses (README, "What
    vaultmem reads"), explicit names before places. Never an unregistered directory: a name
    or path that is not registered is a ConfigError that says how to register it."""
    env = os.environ if environ is None else environ
    for chosen, source in ((name, "--vault"), (env.get("VAULTMEM_VAULT"), "VAULTMEM_VAULT")):
        if chosen:
            entry = config.lookup(chosen)
            if entry is None:
                raise ConfigError(
                    f"{source} {chosen} is not a registered vault: register it with "
                    f"`vaultmem init --vault PATH` (`vaultmem vaults list` shows the vaults)"
                )
            return entry
    if cwd is not None:
        entry = config.containing(cwd)
        if entry is not None:
            return entry
    return config.default_vault()


NO_VAULT_HINT = (
    "no vault is registered: run `vaultmem init --vault ~/notes` (your notes' git folder) to "
    "give the agent memory"
)


# --- changes (CLI only) ------------------------------------------------------------------------


def _document(path: Path) -> Any:
    import tomlkit

    from .files import read_regular

    raw = read_regular(path, advice=LINK_ADVICE)
    if raw is not None:
        return tomlkit.parse(raw.decode("utf-8"))
    doc = tomlkit.document()
    doc.add(tomlkit.comment("vaultmem: your registered vaults and user-level settings."))
    doc.add(tomlkit.comment("Written by `vaultmem init` / `vaultmem vaults`; edits are kept."))
    return doc


def _save(path: Path, doc: Any) -> None:
    """Write atomically, readable by the user only (it may hold a database URL)."""
    import tomlkit

    from .files import atomic_write

    atomic_write(path, tomlkit.dumps(doc), mode=0o600, dir_mode=0o700, advice=LINK_ADVICE)


def unique_name(config: UserConfig, root: Path) -> str:
    """A name for a new vault: its folder's name, made unique and valid."""
    base = re.sub(r"[^\w.\-]+", "-", root.name).strip("-.") or "vault"
    base = base[:60]
    name, n = base, 2
    while config.get(name) is not None:
        name, n = f"{base}-{n}", n + 1
    return name


def register(
    root: Path,
    *,
    name: str | None = None,
    home: Path | None = None,
    database_url: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> VaultEntry:
    """Add `root` to the registered vaults (or update its recorded index). The first vault
    registered becomes the default. Returns the entry as recorded."""
    import tomlkit

    config = load(environ)
    root = root.resolve()
    existing = config.by_path(root)
    if name is not None and not _NAME_RE.match(name):
        raise ConfigError(
            f"{name!r} is not a usable vault name: use letters, digits, '.', '-' or '_'"
        )
    if name is not None and existing is None and config.get(name) is not None:
        raise ConfigError(
            f"a vault named {name!r} is already registered ({config.get(name).path}): "  # type: ignore[union-attr]
            "choose another --name"
        )
    chosen = existing.name if existing is not None else (name or unique_name(config, root))
    doc = _document(config.path)
    vaults = doc.get("vaults")
    if vaults is None:
        vaults = tomlkit.table(is_super_table=True)
        doc["vaults"] = vaults
    entry = vaults.get(chosen)
    if entry is None:
        entry = tomlkit.table()
        vaults[chosen] = entry
    entry["path"] = str(root)
    for key, value in (("home", str(home) if home else None), ("database_url", database_url)):
        if value:
            entry[key] = value
        elif key in entry:
            del entry[key]
    if not doc.get("default") or config.get(str(doc.get("default"))) is None:
        doc["default"] = chosen
    _save(config.path, doc)
    recorded = load(environ).get(chosen)
    assert recorded is not None
    return recorded


def _require(name: str, environ: Mapping[str, str] | None) -> tuple[UserConfig, VaultEntry]:
    config = load(environ)
    entry = config.get(name)
    if entry is None:
        raise ConfigError(f"no vault named {name!r} is registered: `vaultmem vaults list`")
    return config, entry


def unregister(name: str, environ: Mapping[str, str] | None = None) -> VaultEntry:
    """Remove a vault from the registry (its index stays in the database)."""
    config, entry = _require(name, environ)
    doc = _document(config.path)
    del doc["vaults"][name]
    if doc.get("default") == name:
        rest = [v.name for v in config.vaults if v.name != name]
        if rest:
            doc["default"] = rest[0]
        else:
            del doc["default"]
    _save(config.path, doc)
    return entry


def set_default(name: str, environ: Mapping[str, str] | None = None) -> VaultEntry:
    config, entry = _require(name, environ)
    doc = _document(config.path)
    doc["default"] = name
    _save(config.path, doc)
    return entry
