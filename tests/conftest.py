"""Suite-wide options.

`--soak` runs tests marked `soak` (thousands of simulation seeds, long chaos
runs) and `--long` runs tests marked `long` (minutes-long real-process
scenarios); without them those are skipped with the reason shown, so the
default suite stays inside its 15-minute budget. A short version of each
stays in the default run.

Under pytest-xdist, test files are collected longest first, by the figures
in `tests/durations.json` (see `tests/durations.py`), so that with
``--no-loadscope-reorder`` (as `dev.py test` runs) the workers take the long
files first and finish close together.

Hypothesis runs without its per-example deadline (200 ms by default): a
deadline is a timing assertion, and on a shared two-core host one example of
a JWT fuzz test took 580 ms once and 0.1 ms on the rerun, failing the
suite. Timing belongs in the benchmarks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import durations
import pytest
from hypothesis import settings

settings.register_profile("raftlog", deadline=None)
settings.load_profile("raftlog")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False,
                     help="also run the long soak tests (marker: soak)")
    parser.addoption("--long", action="store_true", default=False,
                     help="also run the minutes-long scenario tests (marker: long)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike
        seconds = durations.load()
        root = config.rootpath

        def cost(item: pytest.Item) -> float:
            try:
                return seconds.get(item.path.relative_to(root).as_posix(), 0.0)
            except ValueError:  # outside the project
                return 0.0

        # Stable: a file's tests keep their order, and files without a
        # figure keep theirs, after the known ones.
        items.sort(key=lambda item: -cost(item))
    if not config.getoption("--long"):
        skip_long = pytest.mark.skip(reason="long scenario test: run with `python3 dev.py test --long`")
        for item in items:
            if "long" in item.keywords:
                item.add_marker(skip_long)
    if config.getoption("--soak"):
        # A soak runs as long as its seed count says; the suite-wide
        # pytest-timeout (pyproject) is for the default run.
        for item in items:
            if "soak" in item.keywords:
                item.add_marker(pytest.mark.timeout(0))
        return
    skip = pytest.mark.skip(reason="soak test: run with `python3 dev.py test --soak -m soak`")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _root_log_handlers_restored() -> Iterator[None]:
    """A test that runs a CLI's ``main()`` in-process gets its
    ``logging.basicConfig`` handler, bound to that test's captured stderr.
    Left on the root logger, it outlives the capture, and every later log
    line in the process (a pytest-xdist worker runs many files) fails with
    "I/O operation on closed file". Put the root handlers back after each test."""
    root = logging.getLogger()
    before = list(root.handlers)
    yield
    for handler in root.handlers[:]:
        if handler not in before:
            root.removeHandler(handler)
