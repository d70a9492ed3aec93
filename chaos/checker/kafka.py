"""Checkers for the Kafka queue workload, ported in spirit from Jepsen.

Facts come from the analysis notes of Jepsen's ``jepsen.tests.kafka``
(``tests/kafka.clj``) and its Redpanda and Bufstream reports; the code is our
own. Every checker here reads only the history (`chaos.history`), so each is
unit-tested on small hand-written histories without a cluster.

Conventions shared by all checkers:

- Values are unique per run (the generator sends each value once), so a value
  identifies the send that wrote it.
- A send whose completion is ``info`` (or missing) *may or may not* have
  happened: it is never counted lost, never unseen, and reading it is fine.
  Only ``ok`` sends are promised durable; only ``fail`` sends are promised
  absent (Jepsen analysis 1, aborted reads).
- The *version order* of a partition is its observed offsets, sorted, from
  every read and every ok send that reported an offset. Gaps between offsets
  are allowed: transaction markers take offsets but are invisible (Jepsen
  analysis 2).
- A ``final-read`` op is a fresh consumer that, after the final heal and quiet
  period, read each partition from offset 0 to its end offset; it defines what
  survived.
- Compacted topics (the keyed workload, ``keys`` > 0): a send of ``value``
  has key ``value % keys`` (`chaos.generator.key_of`), and the log cleaner
  may remove a record, but only for a newer record of its key. So a record
  missing from the final read is *superseded* when the final read holds a
  record of the same key at a higher offset, and that is not an anomaly;
  lost-write, unseen and vanished-read checks take it into account.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from chaos.checker.base import Anomaly, Checker, Result, make_result
from chaos.history import (
    JSON,
    History,
    Op,
    OpType,
    Send,
    end_offsets_of,
    pairs,
    records_of,
    sends_of,
)

Key = Hashable


def value_key(v: JSON) -> Key:
    """A hashable stand-in for a JSON value (values compare by content)."""
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return json.dumps(v, sort_keys=True)


@dataclass(frozen=True, slots=True)
class Read:
    """One record one read returned."""

    op: Op
    partition: int
    offset: int
    value: JSON
    final: bool


@dataclass(frozen=True, slots=True)
class FinalRead:
    """What the last completed final read saw of one partition."""

    op: Op
    end_offset: int
    values: frozenset[Key]


@dataclass(slots=True)
class Analysis:
    """Indexes over one history that every checker shares (built by `analyze`)."""

    ok_sends: list[tuple[Op, Send]] = field(default_factory=list)
    #: value -> completion op of a send that certainly failed
    failed: dict[Key, Op] = field(default_factory=dict)
    #: value -> invoke op of a send whose outcome is unknown (info / open)
    indefinite: dict[Key, Op] = field(default_factory=dict)
    #: value -> invoke op of any send (for phantom detection)
    invoked: dict[Key, Op] = field(default_factory=dict)
    reads: list[Read] = field(default_factory=list)
    final: dict[int, FinalRead] = field(default_factory=dict)
    #: partition -> offset -> value -> ops that observed it (reads and ok sends)
    versions: dict[int, dict[int, dict[Key, list[Op]]]] = field(default_factory=dict)
    #: partition -> set of values any read returned
    read_values: dict[int, set[Key]] = field(default_factory=dict)
    #: partition -> highest offset any read returned
    max_read_offset: dict[int, int] = field(default_factory=dict)

    def version_order(self, partition: int) -> list[int]:
        return sorted(self.versions.get(partition, {}))


def analyze(history: History) -> Analysis:
    """Index a history once. O(ops + records)."""
    a = Analysis()
    versions: dict[int, dict[int, dict[Key, list[Op]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for pair in pairs(history.client_ops()):
        inv = pair.invoke
        if inv.f in ("send", "txn"):
            for s in sends_of(inv):
                a.invoked.setdefault(value_key(s.value), inv)
            if pair.type is OpType.OK:
                assert pair.complete is not None
                for s in sends_of(pair.complete):
                    a.ok_sends.append((pair.complete, s))
                    if s.offset is not None:
                        versions[s.partition][s.offset][value_key(s.value)].append(pair.complete)
            elif pair.type is OpType.FAIL:
                assert pair.complete is not None
                for s in sends_of(inv):
                    a.failed[value_key(s.value)] = pair.complete
            else:
                for s in sends_of(inv):
                    a.indefinite[value_key(s.value)] = inv
        elif inv.f in ("poll", "final-read") and pair.type is OpType.OK:
            done = pair.complete
            assert done is not None
            final = done.f == "final-read"
            for p, rows in records_of(done).items():
                for o, v in rows:
                    a.reads.append(Read(done, p, o, v, final))
                    versions[p][o][value_key(v)].append(done)
                    a.read_values.setdefault(p, set()).add(value_key(v))
                    a.max_read_offset[p] = max(a.max_read_offset.get(p, -1), o)
            if final:
                recs = records_of(done)
                for p, end in end_offsets_of(done).items():
                    a.final[p] = FinalRead(
                        done, end, frozenset(value_key(v) for _, v in recs.get(p, []))
                    )
    a.versions = {p: {o: dict(vs) for o, vs in offs.items()} for p, offs in versions.items()}
    return a


def _newest_in_final(a: Analysis, keys: int) -> dict[int, dict[int, int]]:
    """partition -> key -> the highest offset of a record of that key in the
    partition's final read (keyed workload)."""
    newest: dict[int, dict[int, int]] = {}
    for r in a.reads:
        if r.final and isinstance(r.value, int) and not isinstance(r.value, bool):
            per_key = newest.setdefault(r.partition, {})
            key = r.value % keys
            per_key[key] = max(per_key.get(key, -1), r.offset)
    return newest


def _superseded(newest: dict[int, dict[int, int]], keys: int, partition: int, value: JSON,
                offset: int | None) -> bool:
    """Whether the final read holds a newer record of ``value``'s key than
    ``offset`` (so compaction may have removed ``value``)."""
    if not keys or offset is None or not isinstance(value, int) or isinstance(value, bool):
        return False
    return newest.get(partition, {}).get(value % keys, -1) > offset


def _send_anomaly(kind: str, desc: str, op: Op, s: Send, **details: JSON) -> Anomaly:
    return Anomaly(
        kind,
        desc,
        (op,),
        {"partition": s.partition, "value": s.value, "offset": s.offset, **details},
    )


@dataclass(frozen=True, slots=True)
class LostWrites:
    """Acknowledged sends that the log no longer holds.

    - ``lost-write`` (Jepsen analysis 3): an ok send at offset o in partition p,
      where some read of p returned an offset >= o, and no read ever returned
      the value. The log moved past it without it.
    - ``lost-at-end``: final reads of p completed, and an ok send to p is not
      in them (whether or not an earlier poll saw it).

    ``info`` sends are never lost: they may not have happened.

    With ``keys`` (a compacted topic) an ok send missing from the final read
    is fine if a newer record of its key is there (``superseded`` in the
    stats), and ``lost-write`` is not checked: a poll may legitimately never
    see a record the cleaner removed first.
    """

    keys: int = 0

    def check(self, history: History) -> Result:
        a = analyze(history)
        lost: list[Anomaly] = []
        lost_end: list[Anomaly] = []
        newest = _newest_in_final(a, self.keys) if self.keys else {}
        superseded = 0
        for op, s in a.ok_sends:
            k = value_key(s.value)
            seen = k in a.read_values.get(s.partition, set())
            top = a.max_read_offset.get(s.partition, -1)
            if (s.partition in a.final and k not in a.final[s.partition].values
                    and _superseded(newest, self.keys, s.partition, s.value, s.offset)):
                superseded += 1
                continue
            if not self.keys and s.offset is not None and s.offset <= top and not seen:
                lost.append(
                    _send_anomaly(
                        "lost-write",
                        f"ok send at offset {s.offset} never read, though reads reached offset {top}",
                        op,
                        s,
                        max_read_offset=top,
                    )
                )
            elif s.partition in a.final and k not in a.final[s.partition].values:
                fin = a.final[s.partition]
                lost_end.append(
                    Anomaly(
                        "lost-at-end",
                        "ok send missing from the final read"
                        + (" (an earlier poll had read it)" if seen else ""),
                        (op, fin.op),
                        {
                            "partition": s.partition,
                            "value": s.value,
                            "offset": s.offset,
                            "final_end_offset": fin.end_offset,
                            "read_earlier": seen,
                        },
                    )
                )
        stats: dict[str, JSON] = {"ok_sends": len(a.ok_sends),
                                  "indefinite_sends": len(a.indefinite)}
        if self.keys:
            stats["superseded"] = superseded
        return make_result({"lost-write": lost, "lost-at-end": lost_end}, stats=stats)


@dataclass(frozen=True, slots=True)
class Duplicates:
    """One value at two offsets (or in two partitions).

    With idempotence on (``enable.idempotence=true``) a retried send must not
    be written twice (Redpanda #3039 was exactly this); without it duplicates
    are expected under retries and are reported but allowed.
    """

    idempotent: bool = True

    def check(self, history: History) -> Result:
        a = analyze(history)
        where: dict[Key, set[tuple[int, int]]] = defaultdict(set)
        ops: dict[Key, list[Op]] = defaultdict(list)
        raw: dict[Key, JSON] = {}
        for p, offs in a.versions.items():
            for o, vals in offs.items():
                for k, vops in vals.items():
                    where[k].add((p, o))
                    ops[k].extend(vops[:2])
                    raw[k] = k
        dups = [
            Anomaly(
                "duplicate",
                f"value at {len(locs)} positions",
                tuple(sorted({op.index: op for op in ops[k]}.values(), key=lambda o: o.index)),
                {"value": raw[k], "positions": sorted([list(x) for x in locs])},
            )
            for k, locs in where.items()
            if len(locs) > 1
        ]
        dups.sort(key=lambda d: d.ops[0].index if d.ops else 0)
        allowed = frozenset() if self.idempotent else frozenset({"duplicate"})
        return make_result({"duplicate": dups}, allowed=allowed)


@dataclass(frozen=True, slots=True)
class InconsistentOffsets:
    """One offset of a partition holding two values (Jepsen analysis 2).

    Compares every read, on every node and consumer, and the offsets ok sends
    reported: Redpanda #3003 was found this way.
    """

    def check(self, history: History) -> Result:
        a = analyze(history)
        bad: list[Anomaly] = []
        for p in sorted(a.versions):
            for o in sorted(a.versions[p]):
                vals = a.versions[p][o]
                if len(vals) > 1:
                    seen_ops = {op.index: op for vs in vals.values() for op in vs}
                    bad.append(
                        Anomaly(
                            "inconsistent-offset",
                            f"partition {p} offset {o} holds {len(vals)} values",
                            tuple(seen_ops[i] for i in sorted(seen_ops)),
                            {"partition": p, "offset": o, "values": list(vals)},
                        )
                    )
        return make_result({"inconsistent-offset": bad})


RESET_FS = frozenset({"assign", "subscribe", "seek"})


@dataclass(frozen=True, slots=True)
class PollOrder:
    """Within one consumer, successive polls of a partition move forward by one.

    Jepsen's internal ``nonmonotonic-poll`` (a poll returned an offset at or
    below the previous one) and ``poll-skip`` (it jumped over offsets that
    exist in the version order). Positions reset on ``assign``, ``subscribe``,
    ``seek`` and after an ``info`` poll (the consumer may have been rebuilt).
    Under ``subscribe`` a rebalance may legitimately move a consumer: pass
    ``allow_skip=True`` (Jepsen's allowed ``poll-skip`` under subscribe), and
    ``allow_rewind=True``: a member given a partition back resumes from the
    group's committed offset, which may be behind what it read itself
    (at-least-once). Final reads are separate consumers and are not checked here.
    """

    allow_skip: bool = False
    allow_rewind: bool = False

    def check(self, history: History) -> Result:
        a = analyze(history)
        order = {p: a.version_order(p) for p in a.versions}
        last: dict[tuple[JSON, int], tuple[int, Op]] = {}
        nonmono: list[Anomaly] = []
        skips: list[Anomaly] = []
        for op in history.client_ops():
            if op.f in RESET_FS and op.type is OpType.INVOKE:
                for key in [k for k in last if k[0] == op.process]:
                    del last[key]
            if op.f != "poll" or op.type is OpType.INVOKE:
                continue
            if op.type is not OpType.OK:
                for key in [k for k in last if k[0] == op.process]:
                    del last[key]
                continue
            for p, rows in records_of(op).items():
                for o, _v in rows:
                    prev = last.get((op.process, p))
                    last[(op.process, p)] = (o, op)
                    if prev is None:
                        continue
                    po, pop = prev
                    details: dict[str, JSON] = {
                        "process": op.process,
                        "partition": p,
                        "from_offset": po,
                        "to_offset": o,
                    }
                    ops = (pop,) if pop is op else (pop, op)
                    if o <= po:
                        nonmono.append(
                            Anomaly("nonmonotonic-poll", f"offset {po} then {o}", ops, details)
                        )
                        continue
                    vo = order[p]
                    skipped = vo[bisect_right(vo, po) : bisect_left(vo, o)]
                    if skipped:
                        skips.append(
                            Anomaly(
                                "poll-skip",
                                f"offset {po} then {o}, skipping {len(skipped)} record(s)",
                                ops,
                                {**details, "skipped_offsets": skipped[:16]},
                            )
                        )
        allowed = frozenset(
            ({"poll-skip"} if self.allow_skip else set())
            | ({"nonmonotonic-poll"} if self.allow_rewind else set()))
        return make_result({"nonmonotonic-poll": nonmono, "poll-skip": skips}, allowed=allowed)


@dataclass(frozen=True, slots=True)
class VanishedReads:
    """Records a poll returned that the final log does not hold.

    A consumer must only see records below the high watermark; those never
    disappear. A read value missing from the final read of its partition was
    read above what became the HW (``read-above-hw`` if its offset is at or past
    the final end offset) or was replaced (``vanished-read``). ``"unknown"``
    when some read partition has no completed final read. Assumes no retention
    deleted data during the run. With ``keys`` (a compacted topic) a read
    value the final read holds a newer record of its key for was compacted
    away, which is fine.
    """

    keys: int = 0

    def check(self, history: History) -> Result:
        a = analyze(history)
        above: list[Anomaly] = []
        gone: list[Anomaly] = []
        missing_final: set[int] = set()
        newest = _newest_in_final(a, self.keys) if self.keys else {}
        for r in a.reads:
            if r.final:
                continue
            fin = a.final.get(r.partition)
            if fin is None:
                missing_final.add(r.partition)
                continue
            if value_key(r.value) in fin.values:
                continue
            if _superseded(newest, self.keys, r.partition, r.value, r.offset):
                continue
            details: dict[str, JSON] = {
                "partition": r.partition,
                "offset": r.offset,
                "value": r.value,
                "final_end_offset": fin.end_offset,
            }
            if r.offset >= fin.end_offset:
                above.append(
                    Anomaly(
                        "read-above-hw",
                        "read at or past the final end offset",
                        (r.op, fin.op),
                        details,
                    )
                )
            else:
                gone.append(
                    Anomaly(
                        "vanished-read",
                        "read value absent from the final log",
                        (r.op, fin.op),
                        details,
                    )
                )
        reason = (
            f"no completed final read of partitions {sorted(missing_final)}"
            if missing_final
            else ""
        )
        return make_result({"read-above-hw": above, "vanished-read": gone}, unknown_reason=reason)


@dataclass(frozen=True, slots=True)
class AbortedReads:
    """Reads of values whose send certainly failed, or that nobody sent.

    ``aborted-read`` (Jepsen analysis 1, G1a): the writer completed ``fail``,
    e.g. an aborted transaction read under ``isolation.level=read_committed``
    (Bufstream/KAFKA-17754, Redpanda #3036). ``phantom-read``: a value no send
    ever invoked (corruption or a client bug).
    """

    def check(self, history: History) -> Result:
        a = analyze(history)
        aborted: list[Anomaly] = []
        phantom: list[Anomaly] = []
        for r in a.reads:
            k = value_key(r.value)
            details: dict[str, JSON] = {
                "partition": r.partition,
                "offset": r.offset,
                "value": r.value,
            }
            if k in a.failed:
                aborted.append(
                    Anomaly(
                        "aborted-read",
                        "read a value whose send failed",
                        (a.failed[k], r.op),
                        details,
                    )
                )
            elif k not in a.invoked:
                phantom.append(
                    Anomaly("phantom-read", "read a value nobody sent", (r.op,), details)
                )
        return make_result({"aborted-read": aborted, "phantom-read": phantom})


@dataclass(frozen=True, slots=True)
class Unseen:
    """Ok sends that no read ever returned (Jepsen's ``unseen``).

    Invalid when the final read of that partition completed (it read to the
    end, so the record is gone or was never there); ``"unknown"`` when ok sends
    are unseen in partitions without a completed final read. With ``keys`` (a
    compacted topic) an unseen send superseded in the final read is fine.
    """

    keys: int = 0

    def check(self, history: History) -> Result:
        a = analyze(history)
        unseen: list[Anomaly] = []
        undecided: set[int] = set()
        newest = _newest_in_final(a, self.keys) if self.keys else {}
        for op, s in a.ok_sends:
            if value_key(s.value) in a.read_values.get(s.partition, set()):
                continue
            if _superseded(newest, self.keys, s.partition, s.value, s.offset):
                continue
            if s.partition in a.final:
                unseen.append(
                    _send_anomaly("unseen", "ok send never read, even by the final read", op, s)
                )
            else:
                undecided.add(s.partition)
        reason = (
            f"unseen ok sends in partitions {sorted(undecided)} without a final read"
            if undecided
            else ""
        )
        return make_result(
            {"unseen": unseen},
            stats={"undecided_partitions": sorted(undecided)},
            unknown_reason=reason,
        )


def group_offsets_of(op: Op) -> dict[int, int]:
    """``{partition: committed offset}`` a ``group-offsets`` op read (-1: none)."""
    if op.f != "group-offsets" or not isinstance(op.value, Mapping):
        return {}
    return {int(p): int(o) for p, o in (op.value.get("offsets") or {}).items()}


@dataclass(frozen=True, slots=True)
class CommittedUnread:
    """A consumer group committed past an acknowledged record none of its
    members read (``committed-unread``): the group would never deliver it.

    The workload's polls run in one group (``subscribe``), committing what
    they returned; after the final heal a ``group-offsets`` op reads the
    group's committed offsets. Every ok send below a partition's committed
    offset must have been returned by some poll. (A member that crashes
    between receiving records and the history recording them could cause a
    false alarm; the harness records every poll's records as it returns.)
    ``commit-beyond-end``: a committed offset past the final read's end
    offset (the group committed records the log does not hold).
    """

    def check(self, history: History) -> Result:
        a = analyze(history)
        committed: dict[int, int] = {}
        for op in history.client_ops():
            if op.f == "group-offsets" and op.type is OpType.OK:
                committed = group_offsets_of(op)
        if not committed:
            return make_result({}, unknown_reason="no group-offsets read")
        polled: dict[int, set[Key]] = defaultdict(set)
        for r in a.reads:
            if not r.final:
                polled[r.partition].add(value_key(r.value))
        unread: list[Anomaly] = []
        for op, s in a.ok_sends:
            c = committed.get(s.partition, -1)
            if s.offset is not None and s.offset < c and value_key(s.value) not in polled[s.partition]:
                unread.append(_send_anomaly(
                    "committed-unread",
                    f"the group committed offset {c} and no poll returned this record", op, s,
                    committed=c))
        beyond: list[Anomaly] = []
        for p, c in sorted(committed.items()):
            final = a.final.get(p)
            if final is not None and c > final.end_offset:
                beyond.append(Anomaly(
                    "commit-beyond-end", f"committed {c}, log ends at {final.end_offset}",
                    (final.op,), {"partition": p, "committed": c, "end_offset": final.end_offset}))
        return make_result({"committed-unread": unread, "commit-beyond-end": beyond},
                           stats={"committed": {str(p): c for p, c in sorted(committed.items())}})


def kafka_checkers(
    *, idempotent: bool = True, subscribe: bool = False, compacted_keys: int = 0
) -> dict[str, Checker]:
    """The standard set, ready for `chaos.checker.compose`. ``compacted_keys``:
    the keyed workload on a compacted topic (polls may then skip the offsets
    the cleaner removed: ``poll-skip`` is allowed)."""
    return {
        "lost-writes": LostWrites(keys=compacted_keys),
        "duplicates": Duplicates(idempotent=idempotent),
        "inconsistent-offsets": InconsistentOffsets(),
        "poll-order": PollOrder(allow_skip=subscribe or bool(compacted_keys),
                                allow_rewind=subscribe),
        "vanished-reads": VanishedReads(keys=compacted_keys),
        "aborted-reads": AbortedReads(),
        "unseen": Unseen(keys=compacted_keys),
        **({"committed-unread": CommittedUnread()} if subscribe else {}),
    }
