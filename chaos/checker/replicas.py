"""Replica divergence: after the faults heal, replicas agree below the HW.

Followers copy the leader's batches byte for byte (the leader rewrites
``baseOffset`` and ``partitionLeaderEpoch`` once, before replication), so
below the high watermark every replica's log must be *byte-identical*. A
difference is the permanent divergence KIP-101 and KIP-279 fixed in Kafka
(kraft.md section 4, rows 2 and 3).

`ReplicaDivergence` takes the per-node bytes as input; the db layer produces
them with `read_log_below_hw` after stopping the nodes, so the checker itself
never touches a disk.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from chaos.checker.base import UNKNOWN, Anomaly, Result, make_result
from chaos.history import History
from raftlog.records.batch import iter_batches
from raftlog.records.errors import CorruptRecordError

NodeId = int | str
Partition = int | str


def read_log_below_hw(log_dir: str | os.PathLike[str], high_watermark: int) -> bytes:
    """The bytes of every whole batch with last offset < ``high_watermark``.

    Reads the ``<base offset>.log`` segment files of one partition directory in
    offset order, read-only (it never runs recovery, which would truncate), and
    stops at the first batch that reaches the HW or at a torn or corrupt tail
    (`raftlog.records.batch.iter_batches` semantics). Call it only on a stopped
    node, or a live append may show up as a torn tail.
    """
    segs = sorted(
        (int(f.stem), f) for f in Path(log_dir).iterdir() if f.suffix == ".log" and f.stem.isdigit()
    )
    out = bytearray()
    for _base, path in segs:
        data = path.read_bytes()
        try:
            for header, start in iter_batches(data):
                if header.last_offset >= high_watermark:
                    return bytes(out)
                out += data[start : start + header.size_in_bytes]
        except CorruptRecordError:
            return bytes(out)  # corrupt tail: recovery would truncate here too
    return bytes(out)


def _first_difference(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass(frozen=True, slots=True)
class ReplicaDivergence:
    """Checks ``logs[partition][node] = bytes below the HW`` for equality.

    Each partition's replicas are compared with the lowest node id's copy.
    ``divergent-replica`` gives the first differing byte position and both
    lengths. A partition with fewer than two replicas is ``"unknown"``.
    The history argument is unused (checkers share one signature).
    """

    logs: Mapping[Partition, Mapping[NodeId, bytes]]

    def check(self, history: History | None = None) -> Result:
        bad: list[Anomaly] = []
        single: list[str] = []
        for p in sorted(self.logs, key=str):
            replicas = self.logs[p]
            if len(replicas) < 2:
                single.append(str(p))
                continue
            nodes = sorted(replicas, key=str)
            ref_node = nodes[0]
            ref = replicas[ref_node]
            for n in nodes[1:]:
                other = replicas[n]
                if other != ref:
                    pos = _first_difference(ref, other)
                    bad.append(
                        Anomaly(
                            "divergent-replica",
                            f"partition {p}: node {n} differs from node {ref_node} at byte {pos}",
                            (),
                            {
                                "partition": p,
                                "nodes": [ref_node, n],
                                "first_difference": pos,
                                "lengths": [len(ref), len(other)],
                            },
                        )
                    )
        res = make_result(
            {"divergent-replica": bad},
            stats={"partitions": len(self.logs)},
            unknown_reason=f"partitions with < 2 replicas: {single}" if single else "",
        )
        return res


__all__ = ["UNKNOWN", "ReplicaDivergence", "read_log_below_hw"]
