"""The documentation stays short and true: the README under 300 lines, every `vaultmem …` command
the docs show exists with the options they give it, and every link between the docs lands on a
file and a heading that exist. Each check is also shown failing on a made-up case."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click

from vaultmem.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The documents a user reads: the README, docs/ and the benchmarks' README.
DOCS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]

# Code spans that start with "vaultmem" but are not a command line.
NOT_COMMANDS = {
    "vaultmem agent <agent@vaultmem.invalid>",  # the git author of the agent's commits
}

_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
# Fenced blocks that hold command lines; others hold diagrams, JSON, SQL or sample output.
_SHELL = {"bash", "sh", "shell", "console", "zsh"}
_SPAN = re.compile(r"`([^`\n]+)`")
# `vaultmem` as a command word: first on the line, after a path (`.venv/bin/vaultmem`), or after
# a shell operator; in a shell block, also after blanks (`claude mcp add ... vaultmem -- ...`).
_CALL = re.compile(r"(?:^|(?<=/)|(?<=&& )|(?<=; ))vaultmem[ \t]+(?=(\S[^\n]*))")
_CALL_IN_SHELL = re.compile(r"(?:^|(?<=[\s/]))vaultmem[ \t]+(?=(\S[^\n]*))")
# Where a command line ends: a shell operator or a comment.
_END = re.compile(r"\s(?:&&|\|\||;|\||#|>|2>)(?:\s|$)|;$")


def _command_lines(text: str) -> list[str]:
    """Every `vaultmem …` call in a Markdown text: the lines of shell blocks, and inline code
    spans that are a command, each cut where a shell operator or comment ends it, table pipes
    (`\\|`) restored."""
    pieces: list[tuple[re.Pattern[str], str]] = []
    for lang, block in _FENCE.findall(text):
        if lang.strip() in _SHELL:
            pieces += [(_CALL_IN_SHELL, ln) for ln in block.replace("\\\n", " ").splitlines()]
    prose = _FENCE.sub("", text)
    pieces += [(_CALL, span.replace("\\|", "|").strip()) for span in _SPAN.findall(prose)]
    found: list[str] = []
    for call, piece in pieces:
        if piece in NOT_COMMANDS:
            continue
        for rest in call.findall(piece):
            end = _END.search(rest)
            found.append("vaultmem " + (rest[: end.start()] if end else rest).strip())
    return found


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:  # an unbalanced quote in a placeholder ("…)
        return line.split()


def _options(commands: list[click.Command], name: str) -> list[click.Parameter]:
    return [p for c in commands for p in c.params if name in (*p.opts, *p.secondary_opts)]


def walk_command(line: str) -> tuple[list[str], set[str]]:
    """Walk one documented `vaultmem …` line down the click tree. Returns what the CLI does not
    have (a subcommand, each of `a|b` alternatives; an option, each of `[--x|--y]`, that no
    command on the path takes) and the command paths the line names (`hooks install`, ...).
    Words after a command that has no subcommands are its arguments (placeholders)."""
    words = _words(line)[1:]
    current: list[tuple[str, click.Command]] = [("", cli)]
    where = "vaultmem"
    problems: list[str] = []
    named: set[str] = set()
    skip_value = False
    for word in words:
        if word == "--":
            break
        if skip_value:
            skip_value = False
            continue
        bare = word.strip("[]")
        if not bare:
            continue
        if bare.startswith("-") and bare != "-":
            names = [n.split("=")[0] for n in bare.split("|")]
            for name in names:
                if name == "--help":
                    continue
                owners = _options([c for _, c in current], name)
                if not owners:
                    problems.append(f"{line}: `{where}` has no option {name}")
                elif len(names) == 1 and "=" not in bare:
                    skip_value = not any(
                        isinstance(o, click.Option) and (o.is_flag or o.count) for o in owners
                    )
            continue
        groups = [(path, c) for path, c in current if isinstance(c, click.Group)]
        if not groups or word.startswith("["):
            continue
        found: list[tuple[str, click.Command]] = []
        for name in bare.split("|"):
            hits = [
                (f"{path} {name}".strip(), g.get_command(click.Context(g), name))
                for path, g in groups
            ]
            subcommands = [(path, c) for path, c in hits if c is not None]
            if not subcommands:
                problems.append(f"{line}: `{where}` has no command {name!r}")
            found += subcommands
        if not found:
            break
        current, where = found, f"{where} {bare}"
        named.update(path for path, _ in found)
    return problems, named


def command_problems(line: str) -> list[str]:
    return walk_command(line)[0]


def _visible_commands(group: click.Group, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, command in group.commands.items():
        if command.hidden:
            continue
        out.add(f"{prefix}{name}")
        if isinstance(command, click.Group):
            out |= _visible_commands(command, f"{prefix}{name} ")
    return out


def test_the_readme_stays_under_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 300, f"README.md has {len(lines)} lines: move reference material to docs/"


def test_every_command_the_docs_show_exists() -> None:
    lines = [
        (path.relative_to(ROOT), line)
        for path in DOCS
        for line in _command_lines(path.read_text(encoding="utf-8"))
    ]
    readme = [line for path, line in lines if path == Path("README.md")]
    assert len(readme) >= 25 and len(lines) >= 150, (len(readme), len(lines))
    assert [f"{path}: {p}" for path, line in lines for p in command_problems(line)] == []


def test_the_reference_names_every_command() -> None:
    """docs/reference.md lists every command `vaultmem --help` shows (hidden ones are
    internal: the hooks' entry points)."""
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    named = {path for line in _command_lines(reference) for path in walk_command(line)[1]}
    assert _visible_commands(cli) - named == set()
    assert walk_command("vaultmem hooks install|uninstall --claude")[1] == {
        "hooks",
        "hooks install",
        "hooks uninstall",
    }


def test_the_command_check_reports_made_up_commands_and_options() -> None:
    text = (
        'Run `vaultmem frobnicate --now`, `vaultmem query "x" --k 5 --no-such-flag`,\n'
        "`vaultmem hooks install|reinstall --claude`, `vaultmem audit allow --rule R [GLOB]`.\n"
        "```bash\n"
        "vaultmem status --json && vaultmem db restart   # a comment --ignored\n"
        ".venv/bin/vaultmem init --vault /v --name n --colour\n"
        "```\n"
        "| `vaultmem warm status\\|start [--json\\|--yaml]` | a table cell |\n"
        "`vaultmem agent <agent@vaultmem.invalid>` is an author, not a command.\n"
    )
    lines = _command_lines(text)
    assert lines == [
        "vaultmem status --json",
        "vaultmem db restart",
        "vaultmem init --vault /v --name n --colour",
        "vaultmem frobnicate --now",
        'vaultmem query "x" --k 5 --no-such-flag',
        "vaultmem hooks install|reinstall --claude",
        "vaultmem audit allow --rule R [GLOB]",
        "vaultmem warm status|start [--json|--yaml]",
    ]
    problems = [p.split(": ", 1)[1] for line in lines for p in command_problems(line)]
    assert problems == [
        "`vaultmem db` has no command 'restart'",
        "`vaultmem init` has no option --colour",
        "`vaultmem` has no command 'frobnicate'",
        "`vaultmem query` has no option --no-such-flag",
        "`vaultmem hooks` has no command 'reinstall'",
        "`vaultmem warm status|start` has no option --yaml",
    ]


_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#+[ \t]+(.+?)[ \t]*$", re.M)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def link_problems(files: list[Path], root: Path) -> list[str]:
    """`file: target` for every relative link (outside code) in `files` whose file does not
    exist or whose `#anchor` is not a heading of the file it names."""
    out = []
    for path in files:
        text = _FENCE.sub("", path.read_text(encoding="utf-8"))
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                out.append(f"{path.relative_to(root)}: {target}")
            elif anchor and dest.suffix == ".md":
                headings = _HEADING.findall(_FENCE.sub("", dest.read_text(encoding="utf-8")))
                if anchor not in {_anchor(h) for h in headings}:
                    out.append(f"{path.relative_to(root)}: {target}")
    return out


def test_every_link_between_the_docs_lands() -> None:
    assert link_problems(DOCS, ROOT) == []


def test_the_link_check_reports_a_missing_file_or_heading(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "team.md").write_text("# Teams\n\n## Roles and `row-level` security\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/team.md#roles-and-row-level-security), [top](#intro), [web](https://x.invalid)\n"
        "[gone](docs/nowhere.md), [moved](docs/team.md#troubleshooting), [self](#outro)\n"
        "```\n[in code](docs/ignored.md)\n```\n# Intro\n"
    )
    assert link_problems([tmp_path / "README.md"], tmp_path) == [
        "README.md: docs/nowhere.md",
        "README.md: docs/team.md#troubleshooting",
        "README.md: #outro",
    ]


def test_the_reference_lists_every_exit_code_the_errors_use() -> None:
    """docs/reference.md's exit codes are the ones vaultmem's error classes exit with."""
    used = {
        int(code)
        for path in (ROOT / "src" / "vaultmem").rglob("*.py")
        for code in re.findall(r"^\s+exit_code = (\d+)$", path.read_text(), re.M)
    }
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    section = reference.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    listed = {int(n) for n in re.findall(r"(?<![\w.,-])(\d{1,2})\s+(?=[a-z`])", section)}
    assert listed == used | {0}
