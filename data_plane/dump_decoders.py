"""``raftlog dump-log --offsets-decoder`` and ``--transaction-log-decoder``
(kafka-dump-log.sh's): the records of ``__consumer_offsets`` and
``__transaction_state`` segments as JSON, through the coordinators' own
decoders (`data_plane.groups.records`, `data_plane.groups.consumer_records`,
`data_plane.txn.txn_log`).

Each record prints ``key: {"type": <record>, "data": {...}}`` and
``payload: {"data": {...}}`` (null for a tombstone), field names in
Kafka's camelCase; bytes are base64, as Kafka's JSON prints them. A record
that does not decode prints the decoder's error in place of the JSON.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from collections.abc import Callable
from typing import Any

from data_plane.groups import consumer_records, records
from data_plane.txn.txn_log import TxnLogError, decode_record

__all__ = ("offsets_record", "transaction_log_record")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {_camel(f.name): _plain(getattr(value, f.name))
                for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    return value


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _shown(record_type: str, key: Any, value: Any) -> str:
    payload = None if value is None else {"data": _plain(value)}
    return (f"key: {_json({'type': record_type, 'data': _plain(key)})} "
            f"payload: {_json(payload)}")


def offsets_record(key: bytes | None, value: bytes | None) -> str:
    """``key: ... payload: ...`` of a ``__consumer_offsets`` record."""
    if key is None:
        return "key: null payload: null"
    try:
        classic = records.decode_key(key)
        if classic is not None:
            return _shown(type(classic).__name__, classic, records.decode_value(classic, value))
        modern = consumer_records.decode_consumer_key(key)
        if modern is None:
            return f"key: <a record type this coordinator does not use> payload: {len(value or b'')} bytes"
        decoded = (None if value is None
                   else consumer_records.decode_consumer_value(modern, value))
        return _shown(type(modern).__name__, modern, decoded)
    except records.CorruptOffsetsRecordError as exc:
        return f"key: <not decodable: {exc}>"


def transaction_log_record(key: bytes | None, value: bytes | None) -> str:
    """``key: ... payload: ...`` of a ``__transaction_state`` record."""
    if key is None:
        return "key: null payload: null"
    try:
        record = decode_record(key, value)
    except TxnLogError as exc:
        return f"key: <not decodable: {exc}>"
    return _shown("TransactionLogKey", {"transactionalId": record.transactional_id},
                  record.metadata)


DECODERS: dict[str, Callable[[bytes | None, bytes | None], str]] = {
    "offsets": offsets_record, "transaction-log": transaction_log_record}
