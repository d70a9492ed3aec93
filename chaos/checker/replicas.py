"""Replica divergence: after the faults heal, replicas agree below the HW.

Followers copy the leader's batches byte for byte (the leader rewrites
``baseOffset`` and ``partitionLeaderEpoch`` once, before replication), so
below the high watermark every replica's log must be *byte-identical*. A
difference is the permanent divergence KIP-101 and KIP-279 fixed in Kafka
(kraft.md section 4, rows 2 and 3).

`ReplicaDivergence` takes the per-node bytes as input; the db layer produces
them with `read_log_below_hw` after stopping the nodes, so the checker itself
never touches a disk.

A compacted topic's replicas are cleaned by each broker on its own
schedule, so their bytes differ legitimately; there (``compacted``) the
check is on content: every offset two replicas both hold has the same
record in both (leader epoch, key, value, timestamp), and each key's newest
value (a tombstone counting as no value) is the same on every replica. That
value is the one a read_committed consumer sees: records of aborted
transactions do not count, since one replica's cleaner may have removed
them while another's has not run yet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from chaos.checker.base import UNKNOWN, Anomaly, Result, make_result
from chaos.history import History
from raftlog.records import ControlRecordType, decode_records, parse_control_record_key
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
    #: A compacted topic: compare content, not bytes (module docstring).
    compacted: bool = False

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
            if self.compacted:
                bad.extend(_content_differences(p, ref_node, ref, nodes[1:], replicas))
                continue
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


_Record = tuple[int, bytes | None, bytes | None, int]  # leader epoch, key, value, timestamp


def _records(data: bytes) -> tuple[dict[int, _Record], set[int]]:
    """Every record by offset, and the offsets of the records in aborted
    transactions (their producer's ABORT marker follows them here)."""
    out: dict[int, _Record] = {}
    open_txn: dict[int, list[int]] = {}  # producer id -> its open transaction's offsets
    aborted: set[int] = set()
    for header, start in iter_batches(data):
        records = decode_records(data, pos=start)
        if header.is_control:
            ended = open_txn.pop(header.producer_id, [])
            kind = parse_control_record_key(records[0].key)[1] if records else None
            if kind is ControlRecordType.ABORT:
                aborted.update(ended)
        elif header.is_transactional:
            open_txn.setdefault(header.producer_id, []).extend(r.offset for r in records)
        for r in records:
            out[r.offset] = (header.partition_leader_epoch, r.key, r.value, r.timestamp)
    return out, aborted


def _table(records: Mapping[int, _Record], aborted: set[int]) -> dict[bytes, bytes]:
    """Each key's newest value, as a read_committed consumer sees it: records
    of aborted transactions do not count (a cleaner removes them on its own
    schedule), and keys whose newest record is a tombstone are left out."""
    newest: dict[bytes, bytes | None] = {}
    for offset in sorted(records):
        _, key, value, _ = records[offset]
        if key is not None and offset not in aborted:
            newest[key] = value
    return {k: v for k, v in newest.items() if v is not None}


def _content_differences(
    p: Partition, ref_node: NodeId, ref: bytes, others: list[NodeId],
    replicas: Mapping[NodeId, bytes],
) -> list[Anomaly]:
    bad: list[Anomaly] = []
    ref_records, ref_aborted = _records(ref)
    ref_table = _table(ref_records, ref_aborted)
    for n in others:
        records, aborted = _records(replicas[n])
        differing = sorted(o for o in records.keys() & ref_records.keys()
                           if records[o] != ref_records[o])
        if differing:
            bad.append(Anomaly(
                "divergent-replica",
                f"partition {p}: node {n} and node {ref_node} hold different records "
                f"at {len(differing)} offsets",
                (),
                {"partition": p, "nodes": [ref_node, n], "offsets": differing[:16]},
            ))
        table = _table(records, aborted)
        keys = sorted(k for k in table.keys() | ref_table.keys()
                      if table.get(k) != ref_table.get(k))
        if keys:
            bad.append(Anomaly(
                "divergent-replica",
                f"partition {p}: node {n} and node {ref_node} disagree on the newest "
                f"value of {len(keys)} keys",
                (),
                {"partition": p, "nodes": [ref_node, n],
                 "keys": [k.decode(errors="replace") for k in keys[:16]]},
            ))
    return bad


__all__ = ["UNKNOWN", "ReplicaDivergence", "read_log_below_hw"]
