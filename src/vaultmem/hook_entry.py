"""The file Claude Code runs for every prompt: `<python> -S <this file> claude-hook [options]`
(and, with session capture, at every session's end: `... capture-session`).

Design decision: the registered hook runs this file with `-S` rather than the `vaultmem`
console script, because `site` (the venv's .pth files, setuptools' distutils shim, the user
site) is about a fifth of a warm hook's start-up and the warm path needs nothing from it: it
imports only this package and the standard library. Run as a script, `sys.path[0]` is this
package's own directory, whose modules would shadow top-level ones (`markdown.py`), so it is
replaced, before anything else is imported, by the directory that holds the package. Whatever
needs more than the standard library (the cold path, `--help`, any other command) restores
`site` first (`claude_hook.full_environment`).
"""

import os
import sys

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":
    if sys.argv[1:2] == ["claude-hook"]:
        from vaultmem.agent.claude_hook import main as hook_main

        hook_main(sys.argv[2:])  # returns only for --help or bad options: the CLI handles those
    if sys.argv[1:] == ["capture-session"]:
        from vaultmem.agent.capture import main as capture_main

        capture_main()  # SessionEnd: queue the session for `vaultmem distill`; always exits 0
    from vaultmem.agent.claude_hook import full_environment

    full_environment()
    from vaultmem.__main__ import main

    sys.argv[0] = "vaultmem"
    main()
