"""`vaultmem audit`: review what was quarantined as sensitive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..config import Settings, load_settings
from ..terminal import clean
from .base import (
    cli,
    display_path,
    echo,
    json_option,
    print_json,
    registered_root,
    vault_option,
    vault_root,
    writer_start,
)


def _audit_path(path: str) -> str:
    """A quarantined path for people: a token written into the name is masked (`--json` keeps
    the real path, for scripts to act on)."""
    from ..index.sensitive import mask_path_tokens

    return display_path(mask_path_tokens(path))


@cli.group(name="audit")
def audit_group() -> None:
    """Review the files kept out of search as sensitive: list, show, allow, revoke.

    A file with any hit (a secret, a password line, `private: true`, a secret file name) is
    never indexed nor sent to an embedding provider. vaultmem records why (rule ids, line
    numbers), never the secret itself; `show` re-reads the file and prints each match masked.
    """


def _audit_target(
    vault: str | None, path: str | None = None, *, writes: bool = False
) -> tuple[Path, Settings, str]:
    """The vault, its settings and PATH inside it. `allow` and `revoke` write the index, so
    (`writes`) they act only on a registered vault, never on an index left in a repository
    nobody registered."""
    from ..index import audit

    root = registered_root(vault) if writes else vault_root(vault)
    rel = audit.vault_path(root, path) if path is not None else ""
    return root, load_settings(root), rel


@audit_group.command(name="list")
@vault_option
@json_option
def audit_list(vault: str | None, as_json: bool) -> None:
    """List the quarantined files with their risk, rules and line numbers, and the allowed ones.

    --json prints {"quarantined": [...], "allowed": [...]}.
    """
    from ..index import audit
    from ..store import db

    root, settings, _ = _audit_target(vault)
    with db.connect(settings) as conn:
        v = audit.require_vault(conn, root)
        quarantined = audit.list_quarantined(conn, v.id)
        allowed = audit.list_allowed(conn, v.id)
    if as_json:
        print_json(
            {
                "quarantined": [q.to_dict() for q in quarantined],
                "allowed": [a.to_dict() for a in allowed],
            }
        )
        return
    if not quarantined:
        echo(f"nothing quarantined in vault {v.name}")
    else:
        echo(f"{len(quarantined)} quarantined in vault {v.name}:")
    for q in quarantined:
        lines = ", ".join(str(n) for n in q.line_numbers if n) or "-"
        extra = " (an earlier version was allowed, edited since)" * q.allowed_earlier_version
        echo(f"  {_audit_path(q.path)}  [{q.risk}] {', '.join(q.rule_ids)}; lines {lines}{extra}")
    if allowed:
        echo(f"{len(allowed)} allowed after review:")
        for a in allowed:
            when = f"{a.allowed_at:%Y-%m-%d %H:%M}"
            echo(f"  {_audit_path(a.path)}  ({a.state}; allowed {when})")
    if quarantined:
        echo("why: `vaultmem audit show PATH`; a false positive: `vaultmem audit allow PATH`")


@audit_group.command(name="show")
@click.argument("path")
@vault_option
@json_option
def audit_show(path: str, vault: str | None, as_json: bool) -> None:
    """Show why PATH is quarantined: each rule, category and line, with the match masked.

    PATH is relative to the vault root (as `audit list` prints it) or to the current directory.
    The file is re-scanned from HEAD to make the masked previews; no secret is ever printed.
    """
    from ..index import audit
    from ..store import db

    root, settings, rel = _audit_target(vault, path)
    with db.connect(settings) as conn:
        v = audit.require_vault(conn, root)
        detail = audit.show(conn, settings, v, rel)
    if as_json:
        print_json(detail.to_dict())
        return
    allowed = ""
    if detail.allowed_blob_sha:
        allowed = f"; an earlier version was allowed {detail.allowed_at:%Y-%m-%d %H:%M}"
    echo(
        f"{_audit_path(detail.path)}: {detail.risk}, quarantined since "
        f"{detail.first_seen_at:%Y-%m-%d %H:%M} (blob {detail.blob_sha[:12]}){allowed}"
    )
    for f in detail.findings:
        where = f"line {f.line}" if f.line else "file"
        echo(f"  {where:<10} {f.rule_id} ({f.category})  {f.masked}".rstrip())
    if detail.notice:
        echo(f"note: {detail.notice}")
    echo(f"if this is a false positive: vaultmem audit allow {_audit_path(detail.path)}")


@audit_group.command(name="allow")
@click.argument("path", required=False)
@click.option(
    "--rule",
    metavar="RULE",
    help="Allow every quarantined file (under the glob PATH, default all) whose findings all "
    "come from RULE: a reviewed false-positive rule, in bulk.",
)
@click.option("--yes", is_flag=True, help="Do not ask before allowing a real-looking credential.")
@vault_option
@json_option
def audit_allow(
    path: str | None, rule: str | None, yes: bool, vault: str | None, as_json: bool
) -> None:
    """Mark quarantined PATH a reviewed false positive and index it now.

    The decision is bound to the file's current version at HEAD: any later edit is scanned
    again (and quarantined if it still hits). It survives `vaultmem rebuild`; undo it with
    `vaultmem audit revoke PATH`. A file whose findings include a credential beyond doubt (a
    private key, a vendor token) is allowed only after you confirm (or with --yes); answering
    no changes nothing and exits 0.
    """
    from ..errors import ConfirmationRequired
    from ..index import audit
    from ..store import db

    if path is None and rule is None:
        raise click.UsageError("give a PATH, or --rule RULE (with an optional PATH glob)")
    root, settings, rel = _audit_target(vault, None if rule else path, writes=True)

    def run(confirmed: bool) -> Any:
        with db.connect(settings, start=writer_start(settings)) as conn:
            v = audit.require_vault(conn, root)
            if rule:
                return audit.allow_rule(
                    conn, v, rule, path or "*", root, settings=settings, yes=confirmed
                )
            return audit.allow(conn, v, rel, root, settings=settings, yes=confirmed)

    try:
        outcome = run(yes)
    except ConfirmationRequired as exc:
        try:
            confirmed = click.confirm(f"{clean(str(exc))}. Index it anyway?", err=True)
        except click.Abort:  # no answer at all (end of input, Ctrl-C): the same as no
            confirmed = False
        if not confirmed:
            # A question answered no is not a failure: nothing changed, exit 0.
            echo("not allowed: nothing changed, it stays quarantined (`--yes` skips the question)")
            return
        outcome = run(True)
    if isinstance(outcome, audit.BulkAllow):
        if as_json:
            print_json(outcome.to_dict())
            return
        echo(f"allowed {len(outcome.allowed)} files quarantined only by {clean(rule or '')}")
        for d in outcome.allowed:
            echo(f"  {_audit_path(d.path)} at blob {str(d.blob_sha)[:12]}: {d.state}")
        for p, other in sorted(outcome.not_allowed.items()):
            echo(f"  not allowed {_audit_path(p)}: also {', '.join(other)}")
        return
    if as_json:
        print_json(outcome.to_dict())
        return
    echo(
        f"allowed {_audit_path(outcome.path)} at blob {str(outcome.blob_sha)[:12]}: {outcome.state}"
    )


@audit_group.command(name="revoke")
@click.argument("path")
@vault_option
def audit_revoke(path: str, vault: str | None) -> None:
    """Withdraw `audit allow` for PATH: it is scanned again now and quarantined if it hits."""
    from ..index import audit
    from ..store import db

    root, settings, rel = _audit_target(vault, path, writes=True)
    with db.connect(settings, start=writer_start(settings)) as conn:
        v = audit.require_vault(conn, root)
        decision = audit.revoke(conn, v, rel, root, settings=settings)
    echo(f"revoked the review of {_audit_path(decision.path)}: {decision.state}")
