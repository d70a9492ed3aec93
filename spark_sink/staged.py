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

import asyncio
import concurrent.futures
import contextlib
import json
import time
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type hints
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from .kafka_io import SinkError, WriteConfig, produce_batches, producer_settings

#: Long enough for a batch's slowest task plus the driver's commit; the
#: broker caps it at ``transaction.max.timeout.ms`` (15 min).
DEFAULT_STAGED_TXN_TIMEOUT_MS = 120_000
_STATS_INTERVAL_MS = 50

T = TypeVar("T")


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


def _state_consumer(cfg: WriteConfig, sink_id: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cfg.bootstrap_servers,
            "group.id": cfg.state_group(sink_id),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )


def read_state(cfg: WriteConfig, sink_id: str) -> SinkState:
    """The sink's state from its group's committed offset for ``(topic, 0)``."""
    consumer = _state_consumer(cfg, sink_id)
    try:
        tp = consumer.committed([TopicPartition(cfg.topic, 0)], timeout=cfg.timeout_s)[0]
    finally:
        consumer.close()
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


def write_state(cfg: WriteConfig, sink_id: str, state: SinkState) -> None:
    """Commit ``state`` (synchronously; raises on failure)."""
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
    consumer = _state_consumer(cfg, sink_id)
    try:
        tps = consumer.commit(
            offsets=[TopicPartition(cfg.topic, 0, state.next_batch, metadata=metadata)],
            asynchronous=False,
        )
    finally:
        consumer.close()
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
    settings = producer_settings(cfg)
    settings["transactional.id"] = tid
    settings.setdefault("transaction.timeout.ms", DEFAULT_STAGED_TXN_TIMEOUT_MS)
    stats: list[str] = []
    settings["statistics.interval.ms"] = _STATS_INTERVAL_MS
    settings["stats_cb"] = stats.append
    errors: list[str] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None and len(errors) < 5:
            errors.append(f"{err.str()} (partition {msg.partition()})")

    # Only failed deliveries call back into Python.
    settings["delivery.report.only.error"] = True
    settings["on_delivery"] = delivered
    producer = Producer(settings)
    in_txn = False
    try:
        producer.init_transactions(cfg.timeout_s)
        producer.begin_transaction()
        in_txn = True
        rows = produce_batches(
            cfg, producer, batches, task=task, batch_id=batch_id, attempt=attempt
        )
        left = producer.flush(cfg.timeout_s)
        if left:
            raise SinkError(
                f"task {task} of batch {batch_id}: {left} records not "
                f"acknowledged within {cfg.timeout_s} s"
            )
        if errors:
            raise SinkError(f"task {task} of batch {batch_id}: delivery failed: {errors}")
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
    cfg: WriteConfig, sink_id: str, batch_id: int, staged: Sequence[StagedTxn]
) -> None:
    """Decide batch ``batch_id`` (write the state), commit every staged
    transaction, mark the batch done. Raises `SinkError` if a transaction
    cannot be committed (the decision stands; see `settle_batch`)."""
    pending = tuple(
        (s.transactional_id, s.producer_id, s.producer_epoch) for s in staged if s.has_txn
    )
    if cfg.fail_commit == "before_decision":
        raise SinkError(f"injected failure: commit of batch {batch_id} before the decision")
    if pending:
        write_state(cfg, sink_id, SinkState(batch_id + 1, pending))
        if cfg.fail_commit == "after_decision":
            raise SinkError(f"injected failure: commit of batch {batch_id} after the decision")
        _finish(cfg, batch_id, pending)
    write_state(cfg, sink_id, SinkState(batch_id + 1))


def settle_batch(cfg: WriteConfig, sink_id: str, batch_id: int) -> bool:
    """Before writing batch ``batch_id``: True when it is decided already
    (skip it), after finishing its commit if a driver crash interrupted it."""
    state = read_state(cfg, sink_id)
    if not state.decided(batch_id):
        return False
    if state.pending and batch_id == state.next_batch - 1:
        _finish(cfg, batch_id, state.pending)
        write_state(cfg, sink_id, SinkState(state.next_batch))
    return True


def abort_staged(
    cfg: WriteConfig, sink_id: str | None, batch_id: int, staged: Sequence[StagedTxn]
) -> list[str]:
    """EndTxn(abort) for the staged transactions of an undecided batch.
    Returns what could not be aborted (already fenced or ended: nothing to
    undo). A decided batch is left alone: its commit is finished on replay."""
    if sink_id is not None and read_state(cfg, sink_id).decided(batch_id):
        return [f"batch {batch_id} is decided; not aborting"]
    ids = [(s.transactional_id, s.producer_id, s.producer_epoch) for s in staged if s.has_txn]
    failures = _run(end_txns(cfg.bootstrap_servers, ids, commit=False, timeout_s=cfg.timeout_s))
    return [f"{tid}: {err}" for tid, err in failures.items()]


def _finish(cfg: WriteConfig, batch_id: int, pending: Sequence[tuple[str, int, int]]) -> None:
    failures = _run(end_txns(cfg.bootstrap_servers, pending, commit=True, timeout_s=cfg.timeout_s))
    if failures:
        raise SinkError(
            f"batch {batch_id}: {len(failures)} of {len(pending)} staged transactions could "
            f"not be committed: {failures}. PRODUCER_FENCED or INVALID_TXN_STATE means the "
            "coordinator aborted them (transaction.timeout.ms passed before the commit): "
            "their rows are lost"
        )


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code, even in a thread
    whose event loop is already running (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def end_txns(
    bootstrap_servers: str,
    txns: Iterable[tuple[str, int, int]],
    *,
    commit: bool,
    timeout_s: float = 60.0,
) -> dict[str, str]:
    """EndTxn for each ``(transactional id, producer id, epoch)``, concurrently.
    Returns transactional id -> error name for those that failed for good
    (retriable errors are retried until ``timeout_s``). An EndTxn repeated
    after the transaction completed the same way answers NONE."""
    from raftlog.net import KafkaProtocolClient

    txns = list(txns)
    if not txns:
        return {}
    deadline = time.monotonic() + timeout_s
    clients: dict[tuple[str, int], KafkaProtocolClient] = {}

    def client(host: str, port: int) -> KafkaProtocolClient:
        if (host, port) not in clients:
            clients[(host, port)] = KafkaProtocolClient(
                host,
                port,
                client_id="raftlog-spark-sink",
                request_timeout_ms=10_000,
                reconnect_backoff_max_ms=200,
            )
        return clients[(host, port)]

    bootstrap = [
        (h, int(p)) for h, _, p in (a.rpartition(":") for a in bootstrap_servers.split(","))
    ]
    try:
        results = await asyncio.gather(
            *(
                _end_one(client, bootstrap, tid, pid, epoch, commit, deadline)
                for tid, pid, epoch in txns
            )
        )
    finally:
        for c in clients.values():
            await c.close()
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


async def _end_one(
    client: Any,
    bootstrap: list[tuple[str, int]],
    tid: str,
    pid: int,
    epoch: int,
    commit: bool,
    deadline: float,
) -> str | None:
    from kio.schema.end_txn.v3.request import EndTxnRequest
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.schema.types import ProducerId, TransactionalId
    from kio.static.primitive import i8, i16, i64

    from raftlog.net.errors import TransportError

    last = "timeout"
    attempt = 0
    while time.monotonic() < deadline:
        if attempt:
            await asyncio.sleep(min(0.05 * 2 ** min(attempt, 5), 1.0))
        attempt += 1
        host, port = bootstrap[attempt % len(bootstrap)]
        try:
            found = await client(host, port).send(
                FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(tid,))
            )
            coord = found.coordinators[0]
            if coord.error_code != 0:
                last = coord.error_code.name
                continue
            ended = await client(coord.host, int(coord.port)).send(
                EndTxnRequest(
                    transactional_id=TransactionalId(tid),
                    producer_id=ProducerId(i64(pid)),
                    producer_epoch=i16(epoch),
                    committed=commit,
                )
            )
        except (TransportError, OSError, TimeoutError) as exc:
            last = f"{type(exc).__name__}: {exc}"
            continue
        if ended.error_code == 0:
            return None
        last = str(ended.error_code.name)
        if last not in _RETRY:
            return last
    return last
