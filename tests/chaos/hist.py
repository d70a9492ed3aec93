"""A tiny DSL for hand-written Kafka-workload histories (Jepsen kafka-test style)."""

from __future__ import annotations

from typing import Any

from chaos.history import History, Op, OpType


class H:
    """Append ops in order; times are the op index in ms."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def _add(self, type_: str, process: Any, f: str, value: Any) -> H:
        i = len(self.ops)
        self.ops.append(Op(i, i * 1_000_000, OpType(type_), process, f, value))
        return self

    def send(self, proc: int, p: int, v: int, offset: int | None = None, result: str = "ok") -> H:
        self._add("invoke", proc, "send", {"partition": p, "value": v})
        done: dict[str, Any] = {"partition": p, "value": v}
        if offset is not None and result == "ok":
            done["offset"] = offset
        return self._add(result, proc, "send", done)

    def txn(self, proc: int, sends: list[tuple[int, int, int | None]], result: str = "ok") -> H:
        self._add(
            "invoke", proc, "txn", {"sends": [{"partition": p, "value": v} for p, v, _ in sends]}
        )
        done = [
            {
                "partition": p,
                "value": v,
                **({"offset": o} if o is not None and result == "ok" else {}),
            }
            for p, v, o in sends
        ]
        return self._add(result, proc, "txn", {"sends": done})

    def poll(self, proc: int, records: dict[int, list[tuple[int, int]]], result: str = "ok") -> H:
        self._add("invoke", proc, "poll", None)
        value = (
            {"records": {str(p): [list(r) for r in rs] for p, rs in records.items()}}
            if result == "ok"
            else None
        )
        return self._add(result, proc, "poll", value)

    def final(
        self,
        proc: int,
        records: dict[int, list[tuple[int, int]]],
        ends: dict[int, int] | None = None,
    ) -> H:
        if ends is None:
            ends = {p: (rs[-1][0] + 1 if rs else 0) for p, rs in records.items()}
        self._add("invoke", proc, "final-read", None)
        return self._add(
            "ok",
            proc,
            "final-read",
            {
                "records": {str(p): [list(r) for r in rs] for p, rs in records.items()},
                "end_offsets": {str(p): e for p, e in ends.items()},
            },
        )

    def group_offsets(self, proc: int, offsets: dict[int, int]) -> H:
        self._add("invoke", proc, "group-offsets", {"group": "g"})
        return self._add("ok", proc, "group-offsets",
                         {"group": "g", "offsets": {str(p): o for p, o in offsets.items()}})

    def assign(self, proc: int, partitions: list[int]) -> H:
        self._add("invoke", proc, "assign", partitions)
        return self._add("ok", proc, "assign", partitions)

    def nemesis(self, f: str, value: Any = None) -> H:
        self._add("invoke", "nemesis", f, value)
        return self._add("info", "nemesis", f, value)

    def build(self) -> History:
        return History(self.ops)
