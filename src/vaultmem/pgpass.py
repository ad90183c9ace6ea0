"""Database passwords in PostgreSQL's own password file, never in vaultmem's registry.

Design decision: libpq already reads `~/.pgpass` (or `PGPASSFILE`) whenever a connection names no
password, matching host, port, database and role; it ignores the file unless only its owner may
read it. So when a vault is registered with a URL that holds a password, the password goes
there (0600, the line for that host, port, database and role replaced) and the registry records
the URL without it, naming the file (`passfile`, so a process with another HOME finds it too).
A URL whose target this cannot write one line for (several hosts, a socket directory) is
recorded as given.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import quote, urlencode

__all__ = ["password_file", "remember"]

_TARGET_KEYS = ("host", "port", "dbname", "user", "password")


def password_file() -> Path:
    """Where libpq looks: PGPASSFILE, else ~/.pgpass."""
    chosen = os.environ.get("PGPASSFILE")
    return Path(chosen) if chosen else Path.home() / ".pgpass"


def _escape(field: str) -> str:
    return field.replace("\\", "\\\\").replace(":", "\\:")


def _split_line(line: str) -> list[str]:
    fields, current, escaped = [], "", False
    for ch in line:
        if escaped:
            current += ch
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ":":
            fields.append(current)
            current = ""
        else:
            current += ch
    fields.append(current)
    return fields


def remember(url: str | None) -> str | None:
    """`url` without its password, the password now in the password file; `url` unchanged when
    it holds none or names no single TCP host (see the module's docstring)."""
    if not url or "://" not in url:
        return url
    import psycopg

    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return url
    password = info.get("password")
    host = str(info.get("host") or "")
    user = str(info.get("user") or "")
    if not password or not user or not host or "," in host or host.startswith("/"):
        return url
    port = str(info.get("port") or "5432")
    dbname = str(info.get("dbname") or user)
    _write(host, port, dbname, user, str(password))
    params = {k: str(v) for k, v in info.items() if k not in _TARGET_KEYS}
    # Named in the URL, so a process with another HOME (a git hook run from another account's
    # push, a GUI client's bare environment) still finds it.
    params.setdefault("passfile", str(password_file().resolve()))
    shown_host = f"[{host}]" if ":" in host else host
    query = f"?{urlencode(params)}" if params else ""
    return (
        f"postgresql://{quote(user, safe='')}@{shown_host}:{port}/{quote(dbname, safe='')}{query}"
    )


def _write(host: str, port: str, dbname: str, user: str, password: str) -> None:
    path = password_file()
    key = [host, port, dbname, user]
    kept: list[str] = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#") and _split_line(line)[:4] == key:
                continue  # this target's old password
            kept.append(line)
    kept.append(":".join(_escape(f) for f in (*key, password)))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".pgpass.")
    try:
        os.fchmod(fd, 0o600)  # libpq ignores a password file others may read
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("\n".join(kept) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
