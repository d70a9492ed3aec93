"""The `raftlog` program's entry point (``raftlog ...``, ``python -m data_plane``).

kio imports hypothesis when it is installed, only to register test
strategies for its types, and hypothesis pulls in pytest and trio: about a
third of a second of every process start that a node or a CLI call never
uses (the project's one environment has the test tools installed). A
program run hides hypothesis before anything imports kio; importing
`data_plane.cli` as a library (tests) changes nothing.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Run the `raftlog` CLI with hypothesis hidden (see the module docstring)."""
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]  # import -> ImportError
    from data_plane.cli import main as cli_main

    return cli_main()
