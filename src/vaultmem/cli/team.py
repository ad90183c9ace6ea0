"""Several machines and people on one server: `worker`, `grant`, `revoke`."""

from __future__ import annotations

import os
import signal
from typing import Any

import click

from ..errors import ConfigError
from .base import cli, echo, json_option, print_json, settings_for


def _vault_ids(conn: Any, names: tuple[str, ...]) -> list[int] | None:
    """The index rows `--vault NAME` names: a registered vault (its row on this installation,
    a shared one by its name on the server), else the vaults of that name this role sees."""
    from .. import vaults
    from ..store import claims, db

    if not names:
        return None
    user = vaults.load()
    ids: list[int] = []
    for name in names:
        entry = user.get(name)
        found: list[int] = []
        if entry is not None and entry.shared is not None:
            v = db.find_shared_vault(conn, entry.shared)
            found = [v.id] if v is not None else []
        elif entry is not None and entry.path is not None:
            v = db.find_vault(conn, entry.path)
            found = [v.id] if v is not None else []
        else:
            found = claims.vault_ids_named(conn, name)
            conn.commit()
        if not found:
            raise ConfigError(
                f"no vault named {name!r} is visible to this role on the server: "
                "`vaultmem vaults list` shows the vaults"
            )
        ids.extend(found)
    return ids


@cli.command()
@click.option(
    "--vault",
    "vault_names",
    multiple=True,
    metavar="NAME",
    help="Only this vault's backlog (repeat for several). Default: every vault this role may "
    "write.",
)
@click.option("--until-empty", is_flag=True, help="Exit once no chunk is left to embed.")
@click.option(
    "--batch",
    type=click.IntRange(1, 4096),
    help="Chunks per claim (default: VAULTMEM_EMBEDDING_BATCH_SIZE).",
)
@json_option
def worker(
    vault_names: tuple[str, ...], until_empty: bool, batch: int | None, as_json: bool
) -> None:
    """Embed the backlog of every vault on the server this role may write; run anywhere.

    Claims batches of chunks still lacking a vector (rows no other worker holds), embeds each
    with its vault's model, writes the vectors (to the shared cache and every chunk of the same
    text) and releases the claims. Start as many as you like, on any machine that reaches the
    server; a worker killed mid-batch loses nothing. Runs until stopped (Ctrl-C, SIGTERM), or
    with --until-empty until nothing is left; `vaultmem status` shows the workers.
    """
    from ..index.worker import Worker
    from ..store import db

    settings = settings_for()
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True  # finish the batch in hand, then stop

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with db.connect(settings, purpose="vaultmem-worker") as conn:
        db.require_schema(conn)
        ids = _vault_ids(conn, vault_names)
        w = Worker(settings, conn, vault_ids=ids, batch_size=batch)
        if not as_json:
            echo(f"worker {w.result.worker_id}: embedding the backlog (Ctrl-C stops)", err=True)

        def progress(r: Any) -> None:
            if not as_json and r.batches % 10 == 1:
                rate = f", {r.rate:.1f} chunks/s" if r.rate else ""
                echo(
                    f"  {r.filled} chunks given vectors, {r.embedded} texts embedded{rate}",
                    err=True,
                )

        result = w.run(until_empty=until_empty, should_stop=lambda: stop["now"], on_batch=progress)
    if as_json:
        print_json(result.to_dict())
        return
    for model, why in result.skipped_models.items():
        echo(f"not embedded here: {model} ({why})", err=True)
    rate = f" ({result.rate:.1f} chunks/s)" if result.rate else ""
    echo(
        f"worker {result.worker_id}: {result.filled} chunks given vectors{rate}, "
        f"{result.embedded} texts embedded, {result.reused} from the shared cache, "
        f"{result.batches} batches"
    )


@cli.command()
@click.argument("vault")
@click.argument("role")
def grant(vault: str, role: str) -> None:
    """Let ROLE (a database role, or a group role and all its members) read shared VAULT.

    Only the vault's owner may grant it. The role then sees the vault's notes in its hook,
    wrapper and MCP server once it registers it (`vaultmem vaults add --shared VAULT`);
    PostgreSQL's row-level security enforces it, whatever program the role connects with.
    """
    from ..store import access, db

    settings = settings_for()
    with db.connect(settings) as conn:
        db.require_schema(conn)
        added = access.grant(conn, vault, role)
    echo(f"{role} may read {vault}" + ("" if added else " (already could)"))


def _looks_like_a_file(name: str) -> bool:
    """Whether a vault NAME argument is rather a note's path (a shared vault's name is a word)."""
    return "/" in name or name.lower().endswith((".md", ".markdown")) or os.path.isfile(name)


class _RoleArgument(click.Argument):
    """ROLE. `vaultmem revoke PATH` is a natural guess for withdrawing `audit allow`, which is
    `audit revoke`: without a ROLE after what looks like a file, the usage error says so."""

    def process_value(self, ctx: click.Context, value: Any) -> Any:
        try:
            return super().process_value(ctx, value)
        except click.MissingParameter:
            first = ctx.params.get("vault")
            if not isinstance(first, str) or not _looks_like_a_file(first):
                raise
            raise click.MissingParameter(
                "`vaultmem revoke` withdraws a database role's grant on a shared vault. To "
                "withdraw `audit allow` for a file (it is scanned again and quarantined if it "
                f"hits), run `vaultmem audit revoke {first}`.",
                ctx=ctx,
                param=self,
            ) from None


@cli.command()
@click.argument("vault")
@click.argument("role", cls=_RoleArgument)
def revoke(vault: str, role: str) -> None:
    """Withdraw ROLE's grant on shared VAULT (its next query already sees none of it)."""
    from ..store import access, db

    settings = settings_for()
    with db.connect(settings) as conn:
        db.require_schema(conn)
        removed = access.revoke(conn, vault, role)
    echo(f"{role} may no longer read {vault}" if removed else f"{role} had no grant on {vault}")
