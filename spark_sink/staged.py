"""Staged writes: tasks write inside Kafka transactions they leave open; the
driver commits them (two-phase commit, the way Flink's KafkaSink does it).

Phase 1, in each task (`stage_task`): a transactional producer with id
``raftlog-sink.<sink id>.<topic>.<task>`` runs ``init_transactions`` (which
fences an earlier attempt of the same task and aborts its open transaction,
KIP-98), writes the task's rows, flushes, and returns a `StagedTxn`: the
transactional id with the producer id and epoch the coordinator gave it. The
transaction stays open, so read_committed readers see none of it.

Phase 2, on the driver (`commit_batch`):

1. the **decision**: the sink's state group commits offset ``batch_id + 1``
   for ``(topic, 0)`` with the staged transactions in the offset metadata
   (a plain OffsetCommit, replicated like any ``__consumer_offsets`` write);
2. EndTxn(commit) for every staged transaction, over the Kafka protocol from
   the driver (any client holding the id, producer id and epoch may end the
   transaction; the coordinator checks only those);
3. the state is marked done (the transaction list is dropped: once the next
   batch's tasks run ``init_transactions``, those epochs are stale).

Recovery (`settle_batch`, run before a batch and by the tasks): batch ids
below the state's offset are decided and are skipped. If the last decided
batch is not marked done, the driver crashed inside step 2: its EndTxns are
sent again (a commit of an already committed transaction answers NONE) and
the batch is not written again. Without a decision, the staged transactions
of a crashed attempt are aborted by the next ``init_transactions`` of the
same transactional id or by ``transaction.timeout.ms``; they never commit.

Kafka has no atomic commit across transactions: the EndTxns of one batch
complete one after the other (within milliseconds), so a read_committed
reader can see one task's rows of a batch before another's. Once a batch
is decided its rows all become visible, after a driver crash too, provided
the driver comes back within ``transaction.timeout.ms`` (else the coordinator
aborts the staged transactions and `SinkError` says that rows were lost).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import socket
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type hints
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from .kafka_io import (
    SinkError,
    WriteConfig,
    flush_or_raise,
    produce_batches,
    reporting_producer_settings,
)

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Long enough for a batch's slowest task plus the driver's commit; the
#: broker caps it at ``transaction.max.timeout.ms`` (15 min).
DEFAULT_STAGED_TXN_TIMEOUT_MS = 120_000
_STATS_INTERVAL_MS = 50


@dataclass(frozen=True)
class StagedTxn:
    """One task's open transaction, as the driver needs it to end it."""

    task: int
    attempt: int
    rows: int
    transactional_id: str
    producer_id: int  # -1: the task wrote no rows, so there is nothing to end
    producer_epoch: int
    partitions: tuple[int, ...]

    @property
    def has_txn(self) -> bool:
        return self.rows > 0 and self.producer_id >= 0


@dataclass(frozen=True)
class SinkState:
    """The sink's committed state: batches below ``next_batch`` are decided.
    ``pending`` lists the transactions of batch ``next_batch - 1``, which
    may still need their EndTxn(commit) (empty once the batch is marked done)."""

    next_batch: int
    pending: tuple[tuple[str, int, int], ...] = ()

    def decided(self, batch_id: int) -> bool:
        return batch_id < self.next_batch


# --- the sink's state (a consumer-group offset with metadata) -----------------------------

# Group-coordinator errors worth asking again: the coordinator moved or is
# loading, the connection dropped, or a transactional offset commit is pending.
_STATE_RETRY = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
        KafkaError._TRANSPORT,
        KafkaError._WAIT_COORD,
    }
)


def _backoff_s(attempt: int) -> float:
    """Before retry ``attempt`` (1, 2, ...): 0.1 s, doubling, at most 1 s."""
    return min(0.05 * (1 << min(attempt, 5)), 1.0)


class StateStore:
    """The sink's state group, through one consumer kept open until `close`
    (a foreachBatch driver keeps one per sink across batches, which saves
    a connection and a coordinator lookup per state read or write)."""

    def __init__(self, cfg: WriteConfig, sink_id: str) -> None:
        self.cfg, self.sink_id = cfg, sink_id
        self._consumer: Consumer | None = None

    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    "bootstrap.servers": self.cfg.bootstrap_servers,
                    "group.id": self.cfg.state_group(self.sink_id),
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                }
            )
        return self._consumer

    def read(self) -> SinkState:
        return self._retrying(
            "read", lambda left: _read_state(self.cfg, self.sink_id, self.consumer(), left)
        )

    def write(self, state: SinkState) -> None:
        self._retrying(
            "write", lambda _: _write_state(self.cfg, self.sink_id, state, self.consumer())
        )

    def _retrying(self, what: str, call: Callable[[float], _T]) -> _T:
        """``call(seconds left)`` until it succeeds, a non-retriable error, or
        ``cfg.timeout_s``. librdkafka retries a group-coordinator error only
        twice, then ``committed`` / ``commit`` raise it; the state group's
        coordinator moves when its offsets partition changes leader (a broker
        fenced or restarted), and a Kafka consumer rides that out until its
        timeout, as this does. An OffsetCommit is safe to repeat."""
        deadline = time.monotonic() + self.cfg.timeout_s
        attempt = 0
        while True:
            try:
                return call(max(0.1, deadline - time.monotonic()))
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                code = error.code() if isinstance(error, KafkaError) else None
                if code not in _STATE_RETRY or time.monotonic() >= deadline:
                    raise
                attempt += 1
                log.info("sink %s: state %s failed (%s); retrying (attempt %d)",
                         self.sink_id, what, error.name() if error else exc, attempt)
                time.sleep(min(_backoff_s(attempt), max(0.0, deadline - time.monotonic())))

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def read_state(cfg: WriteConfig, sink_id: str) -> SinkState:
    """The sink's state from its group's committed offset for ``(topic, 0)``."""
    store = StateStore(cfg, sink_id)
    try:
        return store.read()
    finally:
        store.close()


def write_state(cfg: WriteConfig, sink_id: str, state: SinkState) -> None:
    """Commit ``state`` (synchronously; raises on failure)."""
    store = StateStore(cfg, sink_id)
    try:
        store.write(state)
    finally:
        store.close()


def _read_state(cfg: WriteConfig, sink_id: str, consumer: Consumer, timeout_s: float) -> SinkState:
    tp = consumer.committed([TopicPartition(cfg.topic, 0)], timeout=timeout_s)[0]
    if tp.error is not None:
        raise KafkaException(tp.error)
    if tp.offset < 0:
        return SinkState(0)
    pending: tuple[tuple[str, int, int], ...] = ()
    if tp.metadata:
        try:
            doc = json.loads(tp.metadata)
            pending = tuple(
                (cfg.transactional_id(sink_id, int(t)), int(p), int(e))
                for t, p, e in doc.get("pending", ())
            )
        except (ValueError, TypeError) as exc:
            raise SinkError(
                f"group {cfg.state_group(sink_id)!r}: unreadable sink state {tp.metadata!r}"
            ) from exc
    return SinkState(tp.offset, pending)


def _write_state(cfg: WriteConfig, sink_id: str, state: SinkState, consumer: Consumer) -> None:
    # Tasks by number, not transactional id, to fit more of them.
    prefix = cfg.transactional_id(sink_id, 0)[:-1]
    tasks = {tid: tid[len(prefix) :] for tid, _, _ in state.pending}
    unknown = [tid for tid, t in tasks.items() if not (tid.startswith(prefix) and t.isdigit())]
    if unknown:
        raise SinkError(f"not transactional ids of sink {sink_id!r}: {unknown}")
    metadata = json.dumps(
        {"pending": [[int(tasks[tid]), pid, epoch] for tid, pid, epoch in state.pending]},
        separators=(",", ":"),
    )
    if len(metadata) > 4096:  # offset.metadata.max.bytes
        raise SinkError(
            f"{len(state.pending)} staged transactions do not fit the sink state "
            f"({len(metadata)} bytes > offset.metadata.max.bytes 4096); "
            "write with fewer tasks (coalesce)"
        )
    tps = consumer.commit(
        offsets=[TopicPartition(cfg.topic, 0, state.next_batch, metadata=metadata)],
        asynchronous=False,
    )
    for tp in tps or ():
        if tp.error is not None:
            raise KafkaException(tp.error)


# --- phase 1: a task stages its rows -------------------------------------------------------


def stage_task(
    cfg: WriteConfig,
    batches: Iterable[pa.RecordBatch],
    *,
    task: int,
    batch_id: int,
    sink_id: str,
    attempt: int = 0,
    check_state: bool = True,
) -> StagedTxn | None:
    """Write one task's rows in a transaction and leave it open.

    Returns None without touching the transactional id when the sink state
    says the batch is decided (``check_state``; a replay). A task with no
    rows returns a `StagedTxn` with ``producer_id`` -1. Any error aborts the
    transaction and raises (`SinkError` for bad rows).
    """
    if check_state and read_state(cfg, sink_id).decided(batch_id):
        return None
    tid = cfg.transactional_id(sink_id, task)
    settings, errors = reporting_producer_settings(cfg)
    settings["transactional.id"] = tid
    settings.setdefault("transaction.timeout.ms", DEFAULT_STAGED_TXN_TIMEOUT_MS)
    stats: list[str] = []
    settings["statistics.interval.ms"] = _STATS_INTERVAL_MS
    settings["stats_cb"] = stats.append
    producer = Producer(settings)
    in_txn = False
    try:
        producer.init_transactions(cfg.timeout_s)
        producer.begin_transaction()
        in_txn = True
        rows = produce_batches(
            cfg, producer, batches, task=task, batch_id=batch_id, attempt=attempt
        )
        flush_or_raise(producer, errors, cfg, task=task, batch_id=batch_id)
        if rows == 0:
            return StagedTxn(task, attempt, 0, tid, -1, -1, ())
        pid, epoch, partitions = _producer_identity(producer, stats, cfg)
        # Returning leaves the transaction open: destroying the producer
        # neither commits nor aborts it.
        in_txn = False
        return StagedTxn(task, attempt, rows, tid, pid, epoch, partitions)
    except BaseException:
        if in_txn:
            # Else the next attempt's init_transactions aborts it.
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(cfg.timeout_s)
        raise


def _producer_identity(
    producer: Producer, stats: list[str], cfg: WriteConfig
) -> tuple[int, int, tuple[int, ...]]:
    """(producer id, epoch, partitions written) from librdkafka's statistics
    (``eos`` and per-partition ``txmsgs``), taken after the flush."""
    stats.clear()
    deadline = time.monotonic() + cfg.timeout_s
    while time.monotonic() < deadline:
        producer.poll(0.01)
        if not stats:
            continue
        doc = json.loads(stats[-1])
        eos = doc.get("eos", {})
        if eos.get("txn_state") != "InTransaction" or eos.get("producer_id", -1) < 0:
            raise SinkError(f"transaction not open after the flush: {eos}")
        parts = doc.get("topics", {}).get(cfg.topic, {}).get("partitions", {})
        written = tuple(
            sorted(int(p) for p, s in parts.items() if int(p) >= 0 and s.get("txmsgs", 0) > 0)
        )
        return int(eos["producer_id"]), int(eos["producer_epoch"]), written
    raise SinkError(f"no producer statistics within {cfg.timeout_s} s")


# --- phase 2: the driver ends the transactions ----------------------------------------------


def commit_batch(
    cfg: WriteConfig,
    sink_id: str,
    batch_id: int,
    staged: Sequence[StagedTxn],
    store: StateStore | None = None,
) -> None:
    """Decide batch ``batch_id`` (write the state), commit every staged
    transaction, mark the batch done. Raises `SinkError` if a transaction
    cannot be committed (the decision stands; see `settle_batch`). ``store``:
    an open `StateStore` to reuse."""
    own = store is None
    store = store or StateStore(cfg, sink_id)
    try:
        _commit_batch(cfg, store, batch_id, staged)
    finally:
        if own:
            store.close()


def _commit_batch(
    cfg: WriteConfig, store: StateStore, batch_id: int, staged: Sequence[StagedTxn]
) -> None:
    pending = tuple(
        (s.transactional_id, s.producer_id, s.producer_epoch) for s in staged if s.has_txn
    )
    if cfg.fail_commit == "before_decision":
        raise SinkError(f"injected failure: commit of batch {batch_id} before the decision")
    if pending:
        store.write(SinkState(batch_id + 1, pending))
        if cfg.fail_commit == "after_decision":
            raise SinkError(f"injected failure: commit of batch {batch_id} after the decision")
        _finish(cfg, batch_id, pending)
    store.write(SinkState(batch_id + 1))


def settle_batch(
    cfg: WriteConfig, sink_id: str, batch_id: int, store: StateStore | None = None
) -> bool:
    """Before writing batch ``batch_id``: True when it is decided already
    (skip it), after finishing its commit if a driver crash interrupted it.
    ``store``: an open `StateStore` to reuse."""
    own = store is None
    store = store or StateStore(cfg, sink_id)
    try:
        state = store.read()
        if not state.decided(batch_id):
            return False
        if state.pending and batch_id == state.next_batch - 1:
            _finish(cfg, batch_id, state.pending)
            store.write(SinkState(state.next_batch))
        return True
    finally:
        if own:
            store.close()


def abort_staged(
    cfg: WriteConfig, sink_id: str | None, batch_id: int, staged: Sequence[StagedTxn]
) -> list[str]:
    """EndTxn(abort) for the staged transactions of an undecided batch.
    Returns what could not be aborted (already fenced or ended: nothing to
    undo). A decided batch is left alone: its commit is finished on replay."""
    if sink_id is not None and read_state(cfg, sink_id).decided(batch_id):
        return [f"batch {batch_id} is decided; not aborting"]
    ids = [(s.transactional_id, s.producer_id, s.producer_epoch) for s in staged if s.has_txn]
    failures = end_txns(cfg.bootstrap_servers, ids, commit=False, timeout_s=cfg.timeout_s)
    return [f"{tid}: {err}" for tid, err in failures.items()]


def _finish(cfg: WriteConfig, batch_id: int, pending: Sequence[tuple[str, int, int]]) -> None:
    failures = end_txns(cfg.bootstrap_servers, pending, commit=True, timeout_s=cfg.timeout_s)
    if failures:
        raise SinkError(
            f"batch {batch_id}: {len(failures)} of {len(pending)} staged transactions could "
            f"not be committed: {failures}. PRODUCER_FENCED or INVALID_TXN_STATE means the "
            "coordinator aborted them (transaction.timeout.ms passed before the commit): "
            "their rows are lost"
        )


def end_txns(
    bootstrap_servers: str,
    txns: Iterable[tuple[str, int, int]],
    *,
    commit: bool,
    timeout_s: float = 60.0,
) -> dict[str, str]:
    """EndTxn for each ``(transactional id, producer id, epoch)``, in
    parallel. Returns transactional id -> error name for those that failed
    for good (retriable errors are retried until ``timeout_s``). An EndTxn
    repeated after the transaction completed the same way answers NONE."""
    txns = list(txns)
    if not txns:
        return {}
    bootstrap = [
        (h, int(p)) for h, _, p in (a.rpartition(":") for a in bootstrap_servers.split(","))
    ]
    deadline = time.monotonic() + timeout_s
    with concurrent.futures.ThreadPoolExecutor(min(len(txns), 16)) as pool:
        results = list(
            pool.map(lambda t: _end_one(bootstrap, t[0], t[1], t[2], commit, deadline), txns)
        )
    return {tid: err for (tid, _, _), err in zip(txns, results, strict=True) if err}


# Transaction-coordinator errors worth asking again (the coordinator moved,
# is loading, or is still writing the previous outcome's markers).
_RETRY = frozenset(
    {
        "not_coordinator",
        "coordinator_not_available",
        "coordinator_load_in_progress",
        "concurrent_transactions",
        "request_timed_out",
    }
)


def _end_one(
    bootstrap: list[tuple[str, int]],
    tid: str,
    pid: int,
    epoch: int,
    commit: bool,
    deadline: float,
) -> str | None:
    last = "timeout"
    attempt = 0
    while time.monotonic() < deadline:
        if attempt:
            time.sleep(_backoff_s(attempt))
        host, port = bootstrap[attempt % len(bootstrap)]
        attempt += 1
        try:
            error, coordinator = _find_coordinator(host, port, tid, deadline)
            if error:
                last = error
                continue
            assert coordinator is not None
            last = _end_txn(*coordinator, tid, pid, epoch, commit, deadline)
        except OSError as exc:
            last = f"{type(exc).__name__}: {exc}"
            continue
        if last == "none":
            return None
        if last not in _RETRY:
            return last
    return last


# --- the two requests, in Kafka's wire format -------------------------------------------------
#
# A blocking socket and struct, rather than the project's asyncio client: the
# Data Source's commit and abort run in a fresh Python process per batch,
# where importing kio costs about a second of CPU. FindCoordinator v1 and
# EndTxn v2 are non-flexible (request header v1, response header v0); v2 is
# the first EndTxn that answers PRODUCER_FENCED (older ones get
# INVALID_PRODUCER_EPOCH instead).

_FIND_COORDINATOR, _END_TXN = 10, 26
_CLIENT_ID = b"raftlog-spark-sink"


def _error_name(code: int) -> str:
    return "none" if code == 0 else str(KafkaError(code).name()).lower()


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _exchange(
    host: str, port: int, api_key: int, version: int, body: bytes, deadline: float
) -> bytes:
    header = struct.pack(">hhih", api_key, version, 1, len(_CLIENT_ID)) + _CLIENT_ID
    frame = header + body
    timeout = max(0.1, min(10.0, deadline - time.monotonic()))
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", _recv(sock, 4))
        response = _recv(sock, size)
    (correlation_id,) = struct.unpack_from(">i", response)
    if correlation_id != 1:
        raise OSError(f"response for correlation id {correlation_id}, not 1")
    return response[4:]


def _recv(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        out += chunk
    return bytes(out)


def _find_coordinator(
    host: str, port: int, tid: str, deadline: float
) -> tuple[str | None, tuple[str, int] | None]:
    """FindCoordinator v1 (key type 1: transaction): (error, (host, port))."""
    r = _exchange(host, port, _FIND_COORDINATOR, 1, _string(tid) + b"\x01", deadline)
    _throttle, error = struct.unpack_from(">ih", r)
    pos = 6
    (msg_len,) = struct.unpack_from(">h", r, pos)
    pos += 2 + max(msg_len, 0)
    _node, host_len = struct.unpack_from(">ih", r, pos)
    pos += 6
    coordinator_host = r[pos : pos + host_len].decode()
    (coordinator_port,) = struct.unpack_from(">i", r, pos + host_len)
    if error:
        return _error_name(error), None
    return None, (coordinator_host, coordinator_port)


def _end_txn(
    host: str, port: int, tid: str, pid: int, epoch: int, commit: bool, deadline: float
) -> str:
    """EndTxn v2; the error name ("none" on success)."""
    body = _string(tid) + struct.pack(">qhb", pid, epoch, 1 if commit else 0)
    _throttle, error = struct.unpack_from(">ih", _exchange(host, port, _END_TXN, 2, body, deadline))
    return _error_name(error)
