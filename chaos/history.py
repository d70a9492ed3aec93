"""Jepsen-style operation histories: the record every other chaos part reads.

An operation is ``(index, time_ns, type, process, f, value)`` exactly as in
Jepsen's ``jepsen.history`` (STYLE.md section 10):

- ``type`` is ``invoke`` when a client starts an operation and ``ok``, ``fail``
  or ``info`` when it completes. ``fail`` means the operation *certainly did
  not happen*; ``info`` means it *may or may not have happened*. A timeout, a
  dropped connection or an indefinite error such as NOT_LEADER_OR_FOLLOWER
  after a leader change (KAFKA-13574) is ``info``, never ``fail``;
  `classify_error` encodes that rule once for every client.
- ``process`` is a client's logical id (an int). After an ``info`` a Jepsen
  process is considered crashed and the client continues under a new id; the
  nemesis uses the process ``"nemesis"``.
- ``time_ns`` is monotonic nanoseconds since the start of the run.

Value shapes for the Kafka workload (JSON; partition keys become strings in
JSON and come back as ints via the accessors below):

- ``send`` invoke: ``{"partition": p, "value": v}``; ok: the same plus
  ``"offset": o``. A ``txn`` op carries ``{"sends": [send, ...]}`` and commits
  or aborts as a whole (Jepsen's ``:txn``).
- ``poll`` / ``final-read`` ok: ``{"records": {p: [[offset, value], ...]}}``;
  a ``final-read`` also carries ``"end_offsets": {p: high_watermark}``: the
  reader read each partition from 0 to that offset after the final heal.
- ``assign`` / ``subscribe`` / ``seek``: reset a consumer's position.
- ``group-offsets`` ok (consumer-group runs, after the final reads):
  ``{"group": id, "offsets": {p: committed offset}}`` (-1: none committed).
- nemesis ops: ``f`` is the fault name (``start-kill``, ``stop-partition``...)
  and ``value`` describes the targets.

Histories are stored as JSONL, one op per line, appended and flushed as they
happen, so a crashed runner leaves a readable history; `read_jsonl` drops a
torn last line (and only a last line).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, TypeAlias

JSON: TypeAlias = Any
"""A JSON-compatible value (dict/list/str/int/float/bool/None)."""

Process: TypeAlias = int | str
NEMESIS = "nemesis"


class OpType(StrEnum):
    """Jepsen's four op types."""

    INVOKE = "invoke"
    OK = "ok"
    FAIL = "fail"
    INFO = "info"


class HistoryError(ValueError):
    """A history is malformed (bad op, bad JSONL line other than a torn tail)."""


@dataclass(frozen=True, slots=True)
class Op:
    """One history entry. ``index`` is the position in the history (0-based)."""

    index: int
    time_ns: int
    type: OpType
    process: Process
    f: str
    value: JSON = None

    def __post_init__(self) -> None:
        if self.index < 0:
            raise HistoryError(f"negative index {self.index}")
        if self.time_ns < 0:
            raise HistoryError(f"negative time {self.time_ns}")
        if not isinstance(self.type, OpType):
            raise HistoryError(f"type must be an OpType, got {self.type!r}")
        if not self.f:
            raise HistoryError("empty f")

    @property
    def is_invoke(self) -> bool:
        return self.type is OpType.INVOKE

    @property
    def is_client(self) -> bool:
        return self.process != NEMESIS

    def to_json(self) -> dict[str, JSON]:
        return {
            "index": self.index,
            "time": self.time_ns,
            "type": self.type.value,
            "process": self.process,
            "f": self.f,
            "value": self.value,
        }

    @staticmethod
    def from_json(obj: Mapping[str, JSON]) -> Op:
        try:
            return Op(
                index=int(obj["index"]),
                time_ns=int(obj["time"]),
                type=OpType(obj["type"]),
                process=obj["process"],
                f=str(obj["f"]),
                value=obj.get("value"),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise HistoryError(f"bad op {obj!r}: {exc}") from exc


# --- classification of client errors ----------------------------------------

# Kafka errors after which the request certainly did not take effect. Anything
# else (timeouts, disconnects, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
# NOT_ENOUGH_REPLICAS_AFTER_APPEND, unknown errors) is indefinite: KAFKA-13574
# shows NOT_LEADER_OR_FOLLOWER returned for a produce that did commit.
DEFINITE_ERRORS: frozenset[str] = frozenset(
    {
        "INVALID_TOPIC_EXCEPTION",
        "UNKNOWN_TOPIC_OR_PARTITION",  # only when the topic never existed
        "MESSAGE_TOO_LARGE",
        "RECORD_LIST_TOO_LARGE",
        "INVALID_REQUIRED_ACKS",
        "TOPIC_AUTHORIZATION_FAILED",
        "NOT_ENOUGH_REPLICAS",  # refused before append (minISR check)
        "TRANSACTION_ABORTED",  # an aborted transaction's writes are invisible
        "INVALID_RECORD",
        "CORRUPT_MESSAGE",
    }
)


def classify_error(error_name: str) -> OpType:
    """Map a Kafka error name (as the client reports it) to ``fail`` or ``info``.

    Only errors in `DEFINITE_ERRORS` are ``fail``; everything else, including
    any name we do not know, is ``info``. Being wrong in the ``info`` direction
    only weakens the checkers; being wrong the other way produces false alarms
    or hides lost writes.
    """
    return OpType.FAIL if error_name.upper() in DEFINITE_ERRORS else OpType.INFO


# --- building histories ------------------------------------------------------


class History(Sequence[Op]):
    """An immutable, index-checked sequence of ops (``ops[i].index == i``)."""

    __slots__ = ("_ops",)

    def __init__(self, ops: Iterable[Op]) -> None:
        self._ops: tuple[Op, ...] = tuple(ops)
        for i, op in enumerate(self._ops):
            if op.index != i:
                raise HistoryError(f"op at position {i} has index {op.index}")

    def __len__(self) -> int:
        return len(self._ops)

    def __getitem__(self, i: int) -> Op:  # type: ignore[override]
        return self._ops[i]

    def __iter__(self) -> Iterator[Op]:
        return iter(self._ops)

    def client_ops(self) -> Iterator[Op]:
        return (op for op in self._ops if op.is_client)

    @staticmethod
    def build(rows: Iterable[tuple[int, str, Process, str, JSON]]) -> History:
        """Build from ``(time_ns, type, process, f, value)`` rows; indexes assigned.

        A convenience for tests and for clients that keep their own order.
        """
        return History(Op(i, t, OpType(ty), p, f, v) for i, (t, ty, p, f, v) in enumerate(rows))


class HistoryRecorder:
    """Assigns indexes and appends ops to a JSONL file as they happen.

    Each op is written as one line and flushed at once (a crashed runner loses
    at most the line being written). ``fsync=True`` also fsyncs every line,
    for runs where the recording host itself is a fault target.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self._file: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115
        self._fsync = fsync
        self._ops: list[Op] = []

    def record(
        self, time_ns: int, type: OpType, process: Process, f: str, value: JSON = None
    ) -> Op:
        op = Op(len(self._ops), time_ns, type, process, f, value)
        self._ops.append(op)
        self._file.write(json.dumps(op.to_json(), separators=(",", ":")) + "\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())
        return op

    def history(self) -> History:
        return History(self._ops)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> HistoryRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_jsonl(history: Iterable[Op], path: str | os.PathLike[str]) -> None:
    """Write a whole history, one JSON object per line."""
    with open(path, "w", encoding="utf-8") as f:
        for op in history:
            f.write(json.dumps(op.to_json(), separators=(",", ":")) + "\n")


def read_jsonl(path: str | os.PathLike[str]) -> History:
    """Read a JSONL history, tolerating a torn last line.

    A last line that does not parse (or lacks its newline and does not parse)
    is the write a crash interrupted: it is dropped. A bad line anywhere else
    is corruption and raises `HistoryError`.
    """
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    ops: list[Op] = []
    last = len(lines) - 1
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            op = Op.from_json(obj)
        except (json.JSONDecodeError, HistoryError) as exc:
            is_tail = n == last or all(not rest.strip() for rest in lines[n + 1 :])
            if is_tail:
                break
            raise HistoryError(f"{path}:{n + 1}: {exc}") from exc
        ops.append(op)
    return History(ops)


# --- pairing invocations and completions -----------------------------------


@dataclass(frozen=True, slots=True)
class Pair:
    """An invocation and its completion (``None`` if the history ended first).

    A missing completion means the same as ``info``: the op may have happened.
    """

    invoke: Op
    complete: Op | None

    @property
    def type(self) -> OpType:
        return OpType.INFO if self.complete is None else self.complete.type

    @property
    def latency_ns(self) -> int | None:
        return None if self.complete is None else self.complete.time_ns - self.invoke.time_ns


def pairs(history: Iterable[Op]) -> list[Pair]:
    """Pair each invoke with the next completion of the same process.

    Ops with no invoke (a completion alone, e.g. an untimed nemesis note) are
    returned as pairs whose invoke is the completion itself. Raises
    `HistoryError` if a process invokes twice without completing (Jepsen
    processes are single-threaded).
    """
    open_: dict[Process, Op] = {}
    out: list[Pair | None] = []
    slot: dict[Process, int] = {}
    for op in history:
        if op.type is OpType.INVOKE:
            if op.process in open_:
                raise HistoryError(
                    f"process {op.process!r} invoked op {op.index} while op "
                    f"{open_[op.process].index} was still open"
                )
            open_[op.process] = op
            slot[op.process] = len(out)
            out.append(None)
        elif op.process in open_:
            inv = open_.pop(op.process)
            if inv.f != op.f:
                raise HistoryError(f"op {op.index} completes {op.f!r} but {inv.f!r} was invoked")
            out[slot.pop(op.process)] = Pair(inv, op)
        else:
            out.append(Pair(op, op))
    for proc, inv in open_.items():
        out[slot[proc]] = Pair(inv, None)
    return [p for p in out if p is not None]


def completions(history: Iterable[Op]) -> dict[int, Op]:
    """Map each invoke's index to its completion (absent if never completed)."""
    return {p.invoke.index: p.complete for p in pairs(history) if p.complete is not None}


# --- typed accessors for the Kafka workload values -------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """One record a send (or txn) op wrote. ``offset`` is None when unknown."""

    partition: int
    value: JSON
    offset: int | None


def sends_of(op: Op) -> list[Send]:
    """The records a ``send`` or ``txn`` op wrote (or tried to write)."""
    if op.f == "send":
        items: list[Mapping[str, JSON]] = [op.value]
    elif op.f == "txn":
        items = list(op.value.get("sends", [])) if op.value else []
    else:
        return []
    out = []
    for it in items:
        off = it.get("offset")
        out.append(Send(int(it["partition"]), it["value"], None if off is None else int(off)))
    return out


def records_of(op: Op) -> dict[int, list[tuple[int, JSON]]]:
    """``{partition: [(offset, value), ...]}`` a poll or final-read returned."""
    if op.f not in ("poll", "final-read") or not isinstance(op.value, Mapping):
        return {}
    recs = op.value.get("records") or {}
    return {int(p): [(int(o), v) for o, v in rows] for p, rows in recs.items()}


def end_offsets_of(op: Op) -> dict[int, int]:
    """``{partition: end offset}`` a ``final-read`` ok reached."""
    if op.f != "final-read" or not isinstance(op.value, Mapping):
        return {}
    return {int(p): int(o) for p, o in (op.value.get("end_offsets") or {}).items()}
