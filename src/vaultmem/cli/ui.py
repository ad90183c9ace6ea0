"""`vaultmem ui`: the local web page for people (the `web` room)."""

from __future__ import annotations

import click

from .base import cli


@cli.command(name="ui")
@click.option(
    "--vault",
    "vault",
    type=str,
    help="The registered vault shown first (a name or a path). Default: as for "
    "`vaultmem context`; every registered vault can be chosen on the page.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="The port on 127.0.0.1 (0: any free one).",
)
@click.option("--no-browser", is_flag=True, help="Print the URL only; do not open a browser.")
def ui_cmd(vault: str | None, port: int, no_browser: bool) -> None:
    """Serve a local page that shows the memory: per-vault figures (as `status`), the
    quarantine to review (allow, revoke; the secret itself is never shown), what the agent got
    (the injection log, and what `context` would deliver for a prompt you type), what the
    agent wrote (the inbox) and each note with its chunks.

    It listens on 127.0.0.1 only and every request needs the random token in the URL it
    prints (the page keeps it in a cookie); it stops with Ctrl-C or when its terminal closes.
    """
    from ..web import serve

    serve(vault, port, open_browser=not no_browser)
