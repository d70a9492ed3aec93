"""Checker results and composition, after Jepsen's ``jepsen.checker``.

A checker looks at a finished history and returns a `Result` whose ``valid``
is ``True``, ``False`` or ``"unknown"`` (Jepsen's ``:valid? :unknown``: the
history does not hold enough information to decide, e.g. the final reads never
completed). `compose` runs several checkers and merges their verdicts the way
Jepsen's ``checker/compose`` and ``merge-valid`` do: any ``False`` wins, then
``"unknown"``, then ``True``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias

from chaos.history import JSON, History, Op

Validity: TypeAlias = bool | Literal["unknown"]
UNKNOWN: Literal["unknown"] = "unknown"

MAX_EXAMPLES = 8
"""Anomaly examples kept per anomaly type (the count is always exact)."""


def merge_valid(values: list[Validity]) -> Validity:
    """Jepsen's ``merge-valid``: False > unknown > True; empty means True."""
    if any(v is False for v in values):
        return False
    if any(v == UNKNOWN for v in values):
        return UNKNOWN
    return True


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One instance of an anomaly, with the ops that show it."""

    kind: str
    description: str
    ops: tuple[Op, ...] = ()
    details: Mapping[str, JSON] = field(default_factory=dict)

    def to_json(self) -> dict[str, JSON]:
        return {
            "kind": self.kind,
            "description": self.description,
            "details": dict(self.details),
            "ops": [op.to_json() for op in self.ops],
        }


@dataclass(frozen=True, slots=True)
class Result:
    """A checker verdict.

    ``anomalies`` maps an anomaly type to *all* instances found (reports trim
    to `MAX_EXAMPLES`); ``stats`` holds counts a reader wants to see even when
    valid (e.g. how many sends were acknowledged). ``children`` is filled by
    `compose`.
    """

    valid: Validity
    anomalies: Mapping[str, tuple[Anomaly, ...]] = field(default_factory=dict)
    stats: Mapping[str, JSON] = field(default_factory=dict)
    children: Mapping[str, Result] = field(default_factory=dict)
    reason: str = ""

    def anomaly_count(self) -> int:
        return sum(len(v) for v in self.anomalies.values()) + sum(
            c.anomaly_count() for c in self.children.values()
        )

    def to_json(self, max_examples: int = MAX_EXAMPLES) -> dict[str, JSON]:
        out: dict[str, JSON] = {"valid": self.valid}
        if self.reason:
            out["reason"] = self.reason
        if self.anomalies:
            out["anomaly_counts"] = {k: len(v) for k, v in self.anomalies.items()}
            out["anomalies"] = {
                k: [a.to_json() for a in v[:max_examples]] for k, v in self.anomalies.items()
            }
        if self.stats:
            out["stats"] = dict(self.stats)
        if self.children:
            out["checkers"] = {k: c.to_json(max_examples) for k, c in self.children.items()}
        return out


class Checker(Protocol):
    """Anything that judges a history."""

    def check(self, history: History) -> Result: ...


def make_result(
    anomalies: Mapping[str, list[Anomaly]],
    *,
    stats: Mapping[str, JSON] | None = None,
    allowed: frozenset[str] = frozenset(),
    unknown_reason: str = "",
) -> Result:
    """Result from found anomalies: invalid if any non-allowed type is present.

    ``allowed`` types are reported but do not make the history invalid (Jepsen's
    ``allowed-error-types``). If nothing disallowed was found and
    ``unknown_reason`` is set, the verdict is ``"unknown"``.
    """
    found = {k: tuple(v) for k, v in anomalies.items() if v}
    bad = [k for k in found if k not in allowed]
    valid: Validity = False if bad else (UNKNOWN if unknown_reason else True)
    return Result(
        valid, found, dict(stats or {}), reason=unknown_reason if valid == UNKNOWN else ""
    )


@dataclass(frozen=True, slots=True)
class Compose:
    """Run named checkers on one history; merge verdicts (Jepsen ``compose``)."""

    checkers: Mapping[str, Checker]

    def check(self, history: History) -> Result:
        children = {name: c.check(history) for name, c in self.checkers.items()}
        return Result(merge_valid([r.valid for r in children.values()]), children=children)


def compose(checkers: Mapping[str, Checker]) -> Compose:
    """``compose({"lost": LostWrites(), ...})``: a checker that runs them all."""
    return Compose(dict(checkers))
