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
VAULT_ENV = "VAULTMEM_VAULT"
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
    """One registered vault and the index it was registered with.

    A *shared* vault (`shared`: its name on the server) is a team's repository indexed once
    for everyone granted it. Its source (the clone or bare repository it is ingested from, on
    one machine) is registered with its `path` and the `ref` it follows (None: HEAD); a member
    who only reads it registers it by name, with no path (`vaultmem vaults add --shared`)."""

    name: str
    path: Path | None
    home: Path | None = None  # the bundled server's home, when it uses the bundled database
    database_url: str | None = None  # an external database (takes precedence over `home`)
    shared: str | None = None
    ref: str | None = None

    @property
    def reads_shared(self) -> bool:
        """A shared vault read from the server only (no source folder on this machine)."""
        return self.shared is not None and self.path is None

    def to_dict(self) -> dict[str, Any]:
        from .dburl import redact_url

        return {
            "name": self.name,
            "path": str(self.path) if self.path is not None else None,
            "home": str(self.home) if self.home else None,
            "database_url": redact_url(self.database_url) if self.database_url else None,
            "shared": self.shared,
            "ref": self.ref,
        }


@dataclass(frozen=True)
class UserConfig:
    """The parsed configuration file: registered vaults, the default, user-level settings."""

    path: Path
    vaults: tuple[VaultEntry, ...] = ()
    default: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    # host name -> this user's installation id on that host (`installation_id`)
    installations: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str) -> VaultEntry | None:
        return next((v for v in self.vaults if v.name == name), None)

    def by_path(self, path: Path) -> VaultEntry | None:
        """The vault whose root is `path` (symlinks resolved)."""
        try:
            wanted = path.resolve()
        except OSError:
            return None
        return next((v for v in self.vaults if v.path is not None and _same(v.path, wanted)), None)

    def containing(self, path: Path) -> VaultEntry | None:
        """The vault that holds `path` (the deepest one, should vaults nest)."""
        try:
            here = path.resolve()
        except OSError:
            return None
        best: VaultEntry | None = None
        for v in self.vaults:
            if v.path is None:
                continue
            root = _resolved(v.path)
            if (here == root or root in here.parents) and (
                best is None or len(root.parts) > len(_resolved(best.path).parts)  # type: ignore[arg-type]
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
        shared = entry.get("shared") if isinstance(entry, dict) else None
        shared = shared if isinstance(shared, str) and shared else None
        if not isinstance(entry, dict) or not (
            isinstance(entry.get("path"), str) or shared is not None
        ):
            raise ConfigError(f'[vaults.{name}] in {path} needs a path = "..."')
        home, url, ref = entry.get("home"), entry.get("database_url"), entry.get("ref")
        raw_path = entry.get("path")
        vaults.append(
            VaultEntry(
                name=name,
                path=Path(raw_path).expanduser() if isinstance(raw_path, str) else None,
                home=Path(home).expanduser() if isinstance(home, str) and home else None,
                database_url=url if isinstance(url, str) and url else None,
                shared=shared,
                ref=ref if isinstance(ref, str) and ref else None,
            )
        )
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise ConfigError(f'[settings] in {path} must be a table of NAME = "value" pairs')
    default = data.get("default")
    installations = data.get("installations", {})
    if not isinstance(installations, dict):
        raise ConfigError(f'[installations] in {path} must be a table of HOST = "id" pairs')
    return UserConfig(
        path=path,
        vaults=tuple(vaults),
        default=default if isinstance(default, str) and default else None,
        settings={str(k): str(v) for k, v in settings.items()},
        installations={str(k): str(v) for k, v in installations.items()},
    )


def requested(name: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The vault asked for by name: `name` (a --vault NAME or PATH), else VAULTMEM_VAULT."""
    env = os.environ if environ is None else environ
    return name or env.get(VAULT_ENV) or None


def resolve(
    config: UserConfig,
    name: str | None = None,
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> VaultEntry | None:
    """The vault a reading command uses, or None when none is registered.

    `name` (a --vault NAME or PATH), else VAULTMEM_VAULT, else the registered vault holding
    `cwd`, else the default vault: the one precedence every reader uses (docs/how-it-works.md,
    "What vaultmem reads"), explicit names before places. Never an unregistered directory: a name
    or path that is not registered is a ConfigError that says how to register it."""
    env = os.environ if environ is None else environ
    for chosen, source in ((name, "--vault"), (env.get(VAULT_ENV), VAULT_ENV)):
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
    root: Path | None,
    *,
    name: str | None = None,
    home: Path | None = None,
    database_url: str | None = None,
    environ: Mapping[str, str] | None = None,
    shared: str | None = None,
    ref: str | None = None,
) -> VaultEntry:
    """Add `root` to the registered vaults (or update its recorded index). The first vault
    registered becomes the default. Returns the entry as recorded.

    `shared`: the vault is the shared vault of that name on the server; `root` is then its
    source (None: this machine only reads it) and `ref` what the source follows."""
    import tomlkit

    from .pgpass import remember

    database_url = remember(database_url)  # a password goes to ~/.pgpass, never the registry
    config = load(environ)
    if root is None:
        if shared is None:
            raise ConfigError("a vault needs a path unless it is a shared vault read by name")
        root_text = None
        existing = next((v for v in config.vaults if v.reads_shared and v.shared == shared), None)
        name = name or (None if existing else shared)
    else:
        root = root.resolve()
        root_text = str(root)
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
    if existing is not None:
        chosen = existing.name
    elif name is not None:
        chosen = name
    else:
        assert root is not None
        chosen = unique_name(config, root)
    doc = _document(config.path)
    vaults = doc.get("vaults")
    if vaults is None:
        vaults = tomlkit.table(is_super_table=True)
        doc["vaults"] = vaults
    entry = vaults.get(chosen)
    if entry is None:
        entry = tomlkit.table()
        vaults[chosen] = entry
    for key, value in (
        ("path", root_text),
        ("shared", shared),
        ("ref", ref),
        ("home", str(home) if home else None),
        ("database_url", database_url),
    ):
        if value:
            entry[key] = value
        elif key in entry:
            del entry[key]
    if not doc.get("default") or config.get(str(doc.get("default"))) is None:
        doc["default"] = chosen
    # This machine's installation, recorded beside the vaults it indexes, so a hook run from a
    # bare environment (a GUI client, `env -i`) acts as the same installation.
    _set_installation(doc, host(), installation_id(environ, user=config))
    _save(config.path, doc)
    recorded = load(environ).get(chosen)
    assert recorded is not None
    return recorded


def _set_installation(doc: Any, host: str, installation_id: str | None) -> None:
    import tomlkit

    if installation_id is None:
        return
    table = doc.get("installations")
    if table is None:
        table = tomlkit.table()
        table.add(tomlkit.comment("this user's vaultmem installation on each machine"))
        doc["installations"] = table
    if table.get(host) != installation_id:
        table[host] = installation_id


def record_installation(
    host: str, installation_id: str, environ: Mapping[str, str] | None = None
) -> None:
    """Record `installation_id` as this user's installation on `host` (first use)."""
    config = load(environ)
    doc = _document(config.path)
    _set_installation(doc, host, installation_id)
    _save(config.path, doc)


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


# --- this installation's id -------------------------------------------------------------------
# A random UUID recorded in the registry's `[installations]` table, keyed by the machine's host
# name. The registry is the one file every command and git hook reads (the hooks name it), so a
# commit from a GUI client or `env -i` acts as the same installation as the user's shell; keyed
# by host because people sync `~/.config` between machines with their dotfiles, and two machines
# that shared an id would share vault rows again, which is what the id prevents (a vault row on
# the server belongs to an installation and its path: `store.db.register_vault`).
# VAULTMEM_INSTALLATION_ID pins it (a container whose host name changes at every start).

INSTALLATION_ENV = "VAULTMEM_INSTALLATION_ID"


def host() -> str:
    """This machine's name, as the registry keys installations."""
    import socket

    return socket.gethostname() or "localhost"


def _uuid(text: str) -> str | None:
    import uuid

    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        return None


def installation_id(
    environ: Mapping[str, str] | None = None,
    *,
    user: UserConfig | None = None,
    create: bool = True,
) -> str | None:
    """This installation's id: VAULTMEM_INSTALLATION_ID, else the one the registry records for
    this host, created (and recorded) on first use unless `create` is False (then None when
    there is none yet)."""
    env = os.environ if environ is None else environ
    if env.get(INSTALLATION_ENV):
        pinned = _uuid(env[INSTALLATION_ENV])
        if pinned is None:
            raise ConfigError(
                f"{INSTALLATION_ENV} must be a UUID, got {env[INSTALLATION_ENV]!r}: fix it in "
                "the environment"
            )
        return pinned
    user = user if user is not None else load(environ)
    found = _uuid(user.installations.get(host(), ""))
    if found is not None or not create:
        return found
    import uuid

    record_installation(host(), str(uuid.uuid4()), environ)
    recorded = _uuid(load(environ).installations.get(host(), ""))
    assert recorded is not None
    return recorded
