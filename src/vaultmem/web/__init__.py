"""The web room: `vaultmem ui`, a local page for people to review the memory.

Front door: `serve(vault, port, open_browser)` runs the server until its terminal stops it;
`create_app(UI(secret))` is the ASGI app (tests start it in a thread). It sits above the agent
and index rooms, beside the CLI: every page calls the library behind the matching command
and renders it; nothing here decides anything the commands do not.
"""

from __future__ import annotations

import socket
import sys
import webbrowser
from pathlib import Path

from ..errors import VaultmemError
from .app import UI, create_app
from .security import Secret

__all__ = ["UI", "Secret", "bind", "create_app", "serve"]

DEFAULT_PORT = 8765


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1 only (port 0: any free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    return sock


def serve(vault: str | None, port: int = DEFAULT_PORT, *, open_browser: bool = True) -> None:
    """Serve the pages on 127.0.0.1 until interrupted (Ctrl-C, the terminal closing). Prints
    the URL with its per-start token; opens it in a browser unless `open_browser` is False."""
    import uvicorn

    from .. import vaults

    # The vault shown first, chosen as `vaultmem context` chooses (--vault, VAULTMEM_VAULT, the
    # registered vault holding the current directory, the default); an unregistered name or
    # path is a ConfigError, said once, before anything starts.
    entry = vaults.resolve(vaults.load(), vault, cwd=Path.cwd())
    # A shared vault read from the server has no folder here to review: the default page.
    first = entry.name if entry is not None and entry.path is not None else None
    try:
        sock = bind(port)
    except OSError as exc:
        raise VaultmemError(
            f"cannot listen on 127.0.0.1:{port} ({exc.strerror or exc}): another `vaultmem ui` "
            "or program may hold it; `--port 0` takes any free port"
        ) from None
    secret = Secret(sock.getsockname()[1])
    app = create_app(UI(secret, first))
    url = secret.url()
    print(f"vaultmem ui: {url}", file=sys.stderr, flush=True)
    if open_browser:
        try:
            opened = webbrowser.open(url)
        except webbrowser.Error:
            opened = False
        if not opened:
            print("no browser could be opened: open the URL above", file=sys.stderr)
    # No access log: a request's URL may carry the token.
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
