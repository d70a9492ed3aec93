"""``__transaction_state`` records and internal-topic partition hashing (KIP-98).

Keys and values follow Kafka's ``TransactionLogKey``/``TransactionLogValue``
version 0 layout, so the bytes are stable and readable by Kafka tooling:

- key: ``version int16 (0), transactionalId string``
- value: ``version int16 (0), producerId int64, producerEpoch int16,
  transactionTimeoutMs int32, transactionStatus int8,
  transactionPartitions [topic string, partitionIds [int32]] (nullable),
  transactionLastUpdateTimestampMs int64, transactionStartTimestampMs int64``
- a null value is a tombstone: the transactional id expired (Dead).

Strings are ``int16 length + UTF-8``; arrays ``int32 count`` (-1 is null).
Version 0 has no last producer id/epoch (KIP-360's retry detection), as in
Kafka: after a coordinator failover they read as -1.

Partitioning matches Kafka exactly so FindCoordinator agrees with Kafka
tooling: ``Utils.abs(key.hashCode()) % partitionCount`` with Java's
``String.hashCode`` over UTF-16 code units, for ``__transaction_state``
(transactional id) and ``__consumer_offsets`` (group id), 50 partitions each.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from data_plane.txn.txn_metadata import TxnMetadata, TxnState
from metadata_quorum.topic_names import GROUP_METADATA_TOPIC as GROUP_METADATA_TOPIC
from metadata_quorum.topic_names import TRANSACTION_STATE_TOPIC as TRANSACTION_STATE_TOPIC

DEFAULT_NUM_PARTITIONS = 50
KEY_VERSION = 0
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")
_VALUE_TAIL = struct.Struct(">qq")


class TxnLogError(ValueError):
    """A ``__transaction_state`` record that cannot be decoded."""


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, as int32."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Kafka ``Utils.abs``: ``Math.abs`` except Integer.MIN_VALUE maps to 0."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(key: str, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """The internal-topic partition owning ``key`` (transactional id or group id)."""
    if num_partitions <= 0:
        raise ValueError(f"partition count must be positive: {num_partitions}")
    return kafka_abs(java_string_hash(key)) % num_partitions


@dataclass(frozen=True, slots=True)
class TxnLogRecord:
    """One ``__transaction_state`` record; ``metadata`` None is a tombstone."""

    transactional_id: str
    metadata: TxnMetadata | None


def _string(s: str) -> bytes:
    raw = s.encode()
    if len(raw) > 0x7FFF:
        raise ValueError("string longer than int16")
    return _I16.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def encode_value(m: TxnMetadata) -> bytes:
    """The v0 value of ``m`` (partitions grouped by topic, sorted)."""
    out = bytearray(_VALUE_HEAD.pack(VALUE_VERSION, m.producer_id, m.producer_epoch,
                                     m.timeout_ms, int(m.state)))
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(m.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out += _I32.pack(len(by_topic))
    for topic, ids in by_topic.items():
        out += _string(topic) + _I32.pack(len(ids))
        out += b"".join(_I32.pack(p) for p in ids)
    out += _VALUE_TAIL.pack(m.last_update_ms, m.txn_start_ms)
    return bytes(out)


def encode_record(record: TxnLogRecord) -> tuple[bytes, bytes | None]:
    """(key, value) bytes; value None for a tombstone."""
    key = encode_key(record.transactional_id)
    return key, None if record.metadata is None else encode_value(record.metadata)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: struct.Struct) -> tuple[int, ...]:
        try:
            values = fmt.unpack_from(self.data, self.pos)
        except struct.error as e:
            raise TxnLogError(f"truncated record at {self.pos}") from e
        self.pos += fmt.size
        return tuple(values)

    def string(self) -> str:
        (n,) = self.take(_I16)
        if n < 0 or self.pos + n > len(self.data):
            raise TxnLogError(f"bad string length {n} at {self.pos}")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        try:
            return raw.decode()
        except UnicodeDecodeError as e:
            raise TxnLogError(str(e)) from e


def decode_record(key: bytes, value: bytes | None) -> TxnLogRecord:
    """Inverse of `encode_record`. Raises `TxnLogError` (unknown version, truncated)."""
    r = _Reader(key)
    (kv,) = r.take(_I16)
    if kv != KEY_VERSION:
        raise TxnLogError(f"key version {kv}")
    tid = r.string()
    if value is None:
        return TxnLogRecord(tid, None)
    r = _Reader(value)
    version, pid, epoch, timeout, status = r.take(_VALUE_HEAD)
    if version != VALUE_VERSION:
        raise TxnLogError(f"value version {version}")
    try:
        state = TxnState(status)
    except ValueError as e:
        raise TxnLogError(f"status {status}") from e
    partitions: set[tuple[str, int]] = set()
    (topics,) = r.take(_I32)
    for _ in range(max(topics, 0)):
        topic = r.string()
        (count,) = r.take(_I32)
        for _ in range(max(count, 0)):
            partitions.add((topic, r.take(_I32)[0]))
    last_update, start = r.take(_VALUE_TAIL)
    if r.pos != len(value):
        raise TxnLogError("trailing bytes in value")
    try:
        meta = TxnMetadata(tid, pid, epoch, timeout, state, frozenset(partitions), start,
                           last_update)
    except ValueError as e:
        raise TxnLogError(str(e)) from e
    return TxnLogRecord(tid, meta)
