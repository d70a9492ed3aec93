"""Readable dump of a ``__cluster_metadata`` segment or snapshot, like
``kafka-dump-log --cluster-metadata-decoder``.

One line per batch (its header fields), then one ``|`` line per record with
its offset, timestamp and payload: for metadata records the JSON of
``{"type", "version", "data"}``; for control records the control type. The
dump never raises on bad input: a corrupt batch or record becomes a line
saying what is wrong, and the dump stops at a corrupt batch header or a torn
tail (as Kafka's tool does).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from metadata_quorum.records import MetadataRecordError, decode_record, record_fields
from raftlog.records import (
    CrcMismatchError,
    RecordError,
    decode_records,
    iter_batches,
    parse_control_record_key,
    validate_batch,
)
from raftlog.records.batch import BatchHeader

__all__ = ["dump_metadata_log", "format_record_payload"]

_TIMESTAMP_LABEL = {"CREATE_TIME": "CreateTime", "LOG_APPEND_TIME": "LogAppendTime"}


def format_record_payload(value: bytes | None) -> str:
    """``{"type":...,"version":...,"data":{...}}`` for a metadata record value,
    or a description of why it does not decode."""
    if value is None:
        return "<null value>"
    try:
        record = decode_record(value)
    except MetadataRecordError as exc:
        return f"<undecodable metadata record: {exc}>"
    return json.dumps(
        {"type": record.TYPE.name, "version": record.VERSION, "data": record_fields(record)},
        separators=(",", ":"),
    )


def dump_metadata_log(data: bytes, *, print_records: bool = True) -> Iterator[str]:
    """Yield the dump of ``data`` (concatenated v2 batches), line by line."""
    view = memoryview(data)
    end = 0
    try:
        for header, pos in iter_batches(view, validate_crc=False):
            end = pos + header.size_in_bytes
            yield from _dump_batch(view, header, pos, print_records)
    except RecordError as exc:
        yield f"Corrupt batch at position {end}: {exc}"
        return
    if end < len(data):
        yield f"Found {len(data) - end} invalid bytes at the end of the input at position {end}"


def _dump_batch(
    view: memoryview, header: BatchHeader, pos: int, print_records: bool
) -> Iterator[str]:
    try:
        validate_batch(view, pos)
        valid = True
    except CrcMismatchError:
        valid = False
    except RecordError:
        valid = False
    last_sequence = (
        -1 if header.base_sequence < 0 else header.base_sequence + header.last_offset_delta
    )
    yield (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.records_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} "
        f"isControl: {_bool(header.is_control)} position: {pos} "
        f"{_TIMESTAMP_LABEL[header.timestamp_type.name]}: {header.max_timestamp} "
        f"size: {header.size_in_bytes} magic: {header.magic} "
        f"compresscodec: {_codec(header)} crc: {header.crc} isvalid: {_bool(valid)}"
    )
    if not print_records:
        return
    try:
        records = decode_records(view, pos=pos, validate_crc=False)
    except RecordError as exc:
        yield f"| <undecodable records: {exc}>"
        return
    for rec in records:
        prefix = (
            f"| offset: {rec.offset} CreateTime: {rec.timestamp} "
            f"keySize: {-1 if rec.key is None else len(rec.key)} "
            f"valueSize: {-1 if rec.value is None else len(rec.value)}"
        )
        if header.is_control:
            try:
                version, kind = parse_control_record_key(rec.key)
                yield f"{prefix} controlType: {kind.name}({int(kind)}) keyVersion: {version}"
            except RecordError as exc:
                yield f"{prefix} <undecodable control record: {exc}>"
        else:
            yield f"{prefix} payload: {format_record_payload(rec.value)}"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _codec(header: BatchHeader) -> str:
    try:
        return header.compression.name.lower()
    except RecordError:
        return f"unknown({header.compression_id})"
