"""The agent room: what Claude Code is given, and how it reaches the agent.

Every path delivers the same fenced, bounded blocks (`render`), built for one prompt by
`context` from `search.retrieve`:

- `context.build_context`: the `context` command and the `bin/agent-with-memory` wrapper;
- `claude_hook.run`: the per-prompt hook as its own lean process (standard library only until it
  must search), which asks the warm service (`warm_client` → `warm.Service`) and otherwise
  answers cold with `context.hook_context`, the same function the service calls;
- `mcp_server.run`: the MCP server (its tools are `mcp_server.DESCRIPTIONS`' keys);
- `injections`: the log of what every path delivered; `claude_settings` / `claude_mcp`: the hook
  and server entries in Claude Code's settings files.

Design decision: this package's `__init__` imports nothing eagerly. The warm hook imports
`agent.claude_hook` and `agent.warm_client` on every prompt, and anything imported here would be
paid there; the names below resolve on first use.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: see the module docstring
if TYPE_CHECKING:
    from .claude_hook import run as run_claude_hook
    from .context import build_context, hook_context
    from .mcp_server import run as run_mcp_server

__all__ = ["build_context", "hook_context", "run_claude_hook", "run_mcp_server"]

_LAZY = {
    "build_context": ("context", "build_context"),
    "hook_context": ("context", "hook_context"),
    "run_claude_hook": ("claude_hook", "run"),
    "run_mcp_server": ("mcp_server", "run"),
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    module, attr = _LAZY[name]
    return getattr(import_module(f"{__name__}.{module}"), attr)
