"""Register, remove and inspect `vaultmem claude-hook` as a Claude Code UserPromptSubmit hook.

Design decision: the merge is a pure function over the parsed settings (`merge_hook`), so it can
be tested exhaustively; the file wrapper (`install_claude_hook`) only reads, merges and writes
atomically. Other hooks and every other setting are kept as they are; our entry is recognised
by its command (`... claude-hook`) and updated in place, so installing twice changes nothing.
Settings layout (Claude Code hooks reference):
    {"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "...",
                                                 "timeout": 10}]}]}}
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..files import append_line, atomic_write, read_regular

EVENT = "UserPromptSubmit"
HOOK_SUBCOMMAND = "claude-hook"
# Session capture (opt-in, `hooks install --claude --capture`): queues the ended session.
CAPTURE_EVENT = "SessionEnd"
CAPTURE_SUBCOMMAND = "capture-session"
CAPTURE_TIMEOUT_SECONDS = 5
# Claude Code's own limit for the hook; `claude-hook` gives up well before it (fails open).
HOOK_TIMEOUT_SECONDS = 10


def vaultmem_program() -> list[str]:
    """An absolute command for this vaultmem (GUI apps, Claude Code among them, have a thin
    PATH): the `vaultmem` being run, else the one on PATH, else `<python> -m vaultmem`."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "vaultmem" and argv0.exists():
        return [str(argv0.resolve())]
    found = shutil.which("vaultmem")
    if found:
        return [str(Path(found).resolve())]
    return [sys.executable, "-m", "vaultmem"]


def hook_command(python: str | None = None, *extra: str) -> str:
    """The shell command Claude Code runs for every prompt: this interpreter (absolute, as it
    was started, so a venv stays a venv) with `-S` on `hook_entry.py` (see there why).

    `python` is the interpreter to record, default this one."""
    return entry_command(HOOK_SUBCOMMAND, python, *extra)


def entry_command(subcommand: str, python: str | None = None, *extra: str) -> str:
    """`<python> -S <path>/hook_entry.py SUBCOMMAND ...` (see `hook_command`)."""
    python = python or sys.executable
    if not python:  # an embedded interpreter that cannot name itself
        return shlex.join([*vaultmem_program(), subcommand, *extra])
    entry = Path(__file__).resolve().parents[1] / "hook_entry.py"
    return shlex.join([python, "-S", str(entry), subcommand, *extra])


def is_our_hook(entry: Any, subcommand: str = HOOK_SUBCOMMAND) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("command"), str)
        and "vaultmem" in entry["command"]
        and subcommand in entry["command"]
    )


def merge_hook(
    settings: dict[str, Any],
    command: str,
    *,
    timeout: int = HOOK_TIMEOUT_SECONDS,
    event: str = EVENT,
    subcommand: str = HOOK_SUBCOMMAND,
) -> tuple[dict[str, Any], bool]:
    """`settings` with our UserPromptSubmit hook (or `event`'s hook running `subcommand`) added
    or updated; (new settings, changed?).

    Pure: the input is not modified. Raises ConfigError when `hooks` has a shape Claude Code
    would not accept either, rather than guessing and clobbering it.
    """
    if not isinstance(settings, dict):
        raise ConfigError("the Claude Code settings file does not hold a JSON object: fix it first")
    out = copy.deepcopy(settings)
    hooks = out.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ConfigError('"hooks" in the Claude Code settings is not an object: fix it first')
    groups = hooks.setdefault(event, [])
    if not isinstance(groups, list):
        raise ConfigError(
            f'"hooks.{event}" in the Claude Code settings is not a list: fix it first'
        )
    wanted = {"type": "command", "command": command, "timeout": timeout}
    found = False
    new_groups: list[Any] = []
    for group in groups:
        if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
            new_groups.append(group)
            continue
        kept = []
        for entry in group["hooks"]:
            if is_our_hook(entry, subcommand):
                if found:
                    continue  # a duplicate from an older install: drop it
                found = True
                entry = {**entry, **wanted}
            kept.append(entry)
        if kept or not group["hooks"]:
            new_groups.append({**group, "hooks": kept})  # groups emptied by de-duplication go
    if not found:
        new_groups.append({"hooks": [wanted]})
    hooks[event] = new_groups
    return out, out != settings


def remove_hook(
    settings: dict[str, Any], *, event: str = EVENT, subcommand: str = HOOK_SUBCOMMAND
) -> tuple[dict[str, Any], bool]:
    """`settings` without our UserPromptSubmit hook (or `event`'s hook running `subcommand`);
    (new settings, changed?). Pure.

    Groups left empty by the removal go, then an empty event list and an empty `hooks`; every
    other hook and setting stays as it is.
    """
    if not isinstance(settings, dict):
        raise ConfigError("the Claude Code settings file does not hold a JSON object: fix it first")
    hooks = settings.get("hooks")
    groups = hooks.get(event) if isinstance(hooks, dict) else None
    if not isinstance(groups, list):
        return copy.deepcopy(settings), False
    new_groups: list[Any] = []
    for group in groups:
        if isinstance(group, dict) and isinstance(group.get("hooks"), list):
            kept = [e for e in group["hooks"] if not is_our_hook(e, subcommand)]
            if len(kept) != len(group["hooks"]):
                if kept:
                    new_groups.append({**group, "hooks": copy.deepcopy(kept)})
                continue
        new_groups.append(copy.deepcopy(group))
    if len(new_groups) == len(groups) and new_groups == groups:
        return copy.deepcopy(settings), False
    out = copy.deepcopy(settings)
    if new_groups:
        out["hooks"][event] = new_groups
    else:
        del out["hooks"][event]
        if not out["hooks"]:
            del out["hooks"]
    return out, True


def session_settings(command: str, *, timeout: int = HOOK_TIMEOUT_SECONDS) -> dict[str, Any]:
    """Settings that register only our hook: for `claude --settings '<json>'` (one session)."""
    return merge_hook({}, command, timeout=timeout)[0]


SCOPES = ("project", "shared", "user")


def settings_path(scope: str, project_dir: Path | None = None) -> Path:
    """Where a scope's settings live (Claude Code settings reference):

    `project`: <project>/.claude/settings.local.json, Claude Code's per-user project settings,
    which git ignores: this machine's paths never reach a file a team commits.
    `shared`: <project>/.claude/settings.json, the file teams commit.
    `user`: ~/.claude/settings.json, every project."""
    if scope == "user":
        return Path.home() / ".claude" / "settings.json"
    if scope == "project":
        return (project_dir or Path.cwd()) / ".claude" / "settings.local.json"
    if scope == "shared":
        return (project_dir or Path.cwd()) / ".claude" / "settings.json"
    raise ConfigError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")


def settings_base(scope: str, project_dir: Path | None = None) -> Path:
    """The folder a scope's settings file lives under, which vaultmem trusts as it is: the home
    for `user`, the project for the others. No link below it is followed (files.py)."""
    return Path.home() if scope == "user" else (project_dir or Path.cwd())


# What a refusal to follow a linked Claude Code file tells the user to do.
LINK_ADVICE = (
    "replace the link with a regular file (a copy of what it points to), or edit the file it "
    "points to yourself; then run the command again"
)


def portable_command() -> str:
    """The hook command for a file a team shares: `vaultmem` from each person's PATH."""
    return shlex.join(["vaultmem", HOOK_SUBCOMMAND])


def keep_out_of_git(path: Path) -> bool:
    """Make sure git ignores `path` (a settings.local.json): add it to the repository's own
    `.git/info/exclude` (never committed) unless an ignore rule covers it. True if ignored."""
    import subprocess

    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel", "--git-path", "info/exclude"],
        cwd=path.parent.parent,
        capture_output=True,
        text=True,
    )
    if top.returncode != 0:
        return False  # not a git repository: nothing can commit it
    root, exclude = (Path(p) for p in top.stdout.splitlines()[:2])
    exclude = exclude if exclude.is_absolute() else path.parent.parent / exclude
    try:
        rel = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return False
    ignored = subprocess.run(["git", "check-ignore", "-q", rel], cwd=root, capture_output=True)
    if ignored.returncode == 0:
        return True
    text = (read_regular(exclude) or b"").decode("utf-8", "replace")
    line = ("" if not text or text.endswith("\n") else "\n") + f"/{rel}\n"
    append_line(exclude, line.encode("utf-8"))
    return True


def read_json_object(path: Path, *, below: Path | None = None) -> dict[str, Any]:
    """A Claude Code JSON file (settings, ~/.claude.json) parsed; {} when it is missing or
    empty. Anything else that is not a JSON object is a ConfigError naming the file; a
    symbolic link (the file, or a folder under `below`) is SymlinkRefused: never followed."""
    data = read_regular(path, below=below, advice=LINK_ADVICE)
    if data is None:
        return {}
    raw = data.decode("utf-8", "replace")
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc.msg}, line {exc.lineno}): fix it, then "
            "run the command again"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object: fix it, then run the command again")
    return data


def install_claude_hook(
    scope: str, project_dir: Path | None = None, *, command: str | None = None
) -> Path:
    """Merge our hook into the scope's settings.json (created if missing). Returns its path."""
    path = settings_path(scope, project_dir)
    base = settings_base(scope, project_dir)
    current = read_json_object(path, below=base)
    if command is None:
        command = portable_command() if scope == "shared" else hook_command()
    merged, changed = merge_hook(current, command)
    if changed or not os.path.lexists(path):
        write_json_atomic(path, merged, below=base)
    if scope == "project":
        keep_out_of_git(path)
    return path


def uninstall_claude_hook(scope: str, project_dir: Path | None = None) -> tuple[Path, bool]:
    """Remove our hook from the scope's settings.json: (its path, was anything removed)."""
    path = settings_path(scope, project_dir)
    base = settings_base(scope, project_dir)
    current = read_json_object(path, below=base)
    cleaned, changed = remove_hook(current)
    if changed:
        write_json_atomic(path, cleaned, below=base)
    return path, changed


@dataclass(frozen=True)
class ClaudeHookStatus:
    scope: str  # "project", "shared" or "user"
    path: Path
    installed: bool
    command: str | None  # the registered command, when installed
    executable_ok: bool  # its program still exists (a removed venv leaves a dead hook)
    problem: str | None  # the settings file could not be read


def claude_hook_status(
    scope: str,
    project_dir: Path | None = None,
    *,
    event: str = EVENT,
    subcommand: str = HOOK_SUBCOMMAND,
) -> ClaudeHookStatus:
    """Whether the scope's settings.json registers our hook (or `event`'s hook running
    `subcommand`), and whether it can still run."""
    path = settings_path(scope, project_dir)
    try:
        data = read_json_object(path, below=settings_base(scope, project_dir))
    except (ConfigError, OSError) as exc:
        return ClaudeHookStatus(scope, path, False, None, False, str(exc))
    hooks = data.get("hooks")
    groups = hooks.get(event) if isinstance(hooks, dict) else None
    for group in groups if isinstance(groups, list) else []:
        entries = group.get("hooks") if isinstance(group, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if is_our_hook(entry, subcommand):
                command = entry["command"]
                return ClaudeHookStatus(scope, path, True, command, command_runnable(command), None)
    return ClaudeHookStatus(scope, path, False, None, False, None)


def command_runnable(command: str) -> bool:
    """True when a registered command's program exists and can be run (and the script it runs,
    for `<python> -S <path>/hook_entry.py`: a venv rebuilt for another Python loses it)."""
    try:
        program, *args = shlex.split(command)
    except ValueError:
        return False
    if any(os.path.isabs(a) and a.endswith(".py") and not os.path.isfile(a) for a in args):
        return False
    if os.sep in program:
        return os.access(os.path.expanduser(program), os.X_OK)
    return shutil.which(program) is not None


def write_json_atomic(path: Path, data: dict[str, Any], *, below: Path | None = None) -> None:
    """`data` as indented JSON, written atomically, keeping the file's mode (a new file gets
    0600: these files are the user's own state); never through a symbolic link (the file,
    or a folder under `below`)."""
    atomic_write(
        path, json.dumps(data, indent=2, ensure_ascii=False) + "\n", below=below, advice=LINK_ADVICE
    )


def capture_command(scope: str) -> str:
    """The SessionEnd command: like the prompt hook's (`-S` on hook_entry.py), or `vaultmem
    capture-session` from PATH for a file a team shares."""
    if scope == "shared":
        return shlex.join(["vaultmem", CAPTURE_SUBCOMMAND])
    return entry_command(CAPTURE_SUBCOMMAND)


def install_capture_hook(scope: str, project_dir: Path | None = None) -> Path:
    """Merge the SessionEnd capture hook into the scope's settings.json. Returns its path."""
    path = settings_path(scope, project_dir)
    base = settings_base(scope, project_dir)
    current = read_json_object(path, below=base)
    merged, changed = merge_hook(
        current,
        capture_command(scope),
        timeout=CAPTURE_TIMEOUT_SECONDS,
        event=CAPTURE_EVENT,
        subcommand=CAPTURE_SUBCOMMAND,
    )
    if changed or not os.path.lexists(path):
        write_json_atomic(path, merged, below=base)
    if scope == "project":
        keep_out_of_git(path)
    return path


def uninstall_capture_hook(scope: str, project_dir: Path | None = None) -> tuple[Path, bool]:
    """Remove the SessionEnd capture hook from the scope's settings.json."""
    path = settings_path(scope, project_dir)
    base = settings_base(scope, project_dir)
    current = read_json_object(path, below=base)
    cleaned, changed = remove_hook(current, event=CAPTURE_EVENT, subcommand=CAPTURE_SUBCOMMAND)
    if changed:
        write_json_atomic(path, cleaned, below=base)
    return path, changed
