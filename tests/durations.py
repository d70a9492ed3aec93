"""Seconds each test file took, for the suite's scheduling.

The default run (`dev.py test`) hands whole files to two pytest-xdist
workers. pytest-xdist queues files by their number of tests, which puts the
files with a few long tests (real clusters, chaos runs, Spark) last, so one
worker can be left running one of them while the other idles. With
`--no-loadscope-reorder`, files are queued in collection order instead, and
`tests/conftest.py` sorts the collection by these figures, longest first
(largest work first keeps the two workers' finishing times close).

Refresh the figures from a run's JUnit report (any run that covers the
suite; figures need only be roughly right, and a file missing from them
runs after the known ones):

    .venv/bin/python -m pytest -n 2 --dist loadfile --junitxml /tmp/junit.xml
    .venv/bin/python tests/durations.py /tmp/junit.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

FIGURES = Path(__file__).with_name("durations.json")


def load() -> dict[str, float]:
    """Test file (relative to the project root) -> seconds; empty without figures."""
    try:
        return {str(k): float(v) for k, v in json.loads(FIGURES.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def from_junit(report: Path) -> dict[str, float]:
    seconds: Counter[str] = Counter()
    for case in ET.parse(report).iter("testcase"):
        # classname is the dotted module path, plus a class for methods.
        parts = str(case.get("classname", "")).split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if parts:
            seconds["/".join(parts) + ".py"] += float(case.get("time", 0) or 0)
    return {path: round(s, 1) for path, s in sorted(seconds.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    figures = from_junit(Path(argv[0]))
    FIGURES.write_text(json.dumps(figures, indent=0, sort_keys=True) + "\n")
    print(f"{len(figures)} files, {sum(figures.values()):.0f} s in all -> {FIGURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
