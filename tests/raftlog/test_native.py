"""raftlog.native: compiled modules never run older code than their sources."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from raftlog import native


def test_every_listed_module_exists_and_is_what_python_imports_when_compiled() -> None:
    for module in native.MODULES:
        assert (native.ROOT / module).is_file(), module
    if native.state() != "fresh":
        pytest.skip(f"nothing compiled here ({native.state()}): `python3 dev.py` compiles them")
    for module in native.MODULES:
        name = module.removesuffix(".py").replace("/", ".")
        assert importlib.import_module(name).__file__.endswith(".so"), name  # type: ignore[union-attr]


def test_a_source_changed_since_the_build_makes_the_tree_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check compares the stamp the build wrote with the sources now; it
    refuses compiled modules whose stamp is missing or different."""
    stamp = tmp_path / "sources.sha256"
    monkeypatch.setattr(native, "STAMP", stamp)
    compiled = [tmp_path / "batch.so"]
    monkeypatch.setattr(native, "_compiled", lambda: compiled * len(native.MODULES))

    stamp.write_text(native.digest() + "\n")
    assert native.state() == "fresh"
    native.check_fresh()

    stamp.write_text("0" * 64 + "\n")  # built from other sources
    assert native.state() == "stale"
    with pytest.raises(native.StaleNativeBuildError, match="older than their sources"):
        native.check_fresh()

    stamp.unlink()
    assert native.state() == "stale"

    monkeypatch.setattr(native, "_compiled", lambda: compiled)  # some modules missing
    stamp.write_text(native.digest() + "\n")
    assert native.state() == "stale"

    monkeypatch.setattr(native, "_compiled", list)  # nothing compiled: the sources run
    assert native.state() == "pure"
    native.check_fresh()


def test_the_digest_covers_the_module_list_and_each_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = tmp_path / "m.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(native, "ROOT", tmp_path)
    monkeypatch.setattr(native, "MODULES", ("m.py",))
    before = native.digest()
    assert native.digest() == before
    source.write_text("x = 2\n")
    assert native.digest() != before
    monkeypatch.setattr(native, "MODULES", ())
    assert native.digest() != before
