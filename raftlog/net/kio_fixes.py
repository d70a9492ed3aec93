"""Schemas that replace kio's where kio cannot carry a value Kafka sends.

DescribeTransactions v0: ``TransactionStartTimeMs`` is -1 when the
transactional id has no transaction open (Kafka's ``txnStartTimestamp``).
kio types it as a timezone-aware datetime and refuses to read a negative
one, so a client could not decode the answer for any idle transactional id.
Here it is what it is on the wire, int64 milliseconds. The classes are kio
entities like the generated ones (same class attributes, same field
metadata), so kio's readers and writers handle them.

The delegation-token responses (KIP-48) have the same problem: Kafka
answers an error with -1 timestamps (CreateDelegationToken's issue, expiry
and max, Renew's expiry), and ExpireDelegationToken with a negative period
echoes it as the expiry. `_int64_timestamps` derives each such response
class from kio's with its ``datetime_i64`` fields as int64 milliseconds.

`raftlog.net.registry.schemas` returns these in place of kio's.
"""

import dataclasses
import importlib
import typing
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.describe_transactions.v0.response import TopicData
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import ProducerId, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32Timedelta, i64

__all__ = ("RESPONSE_OVERRIDES", "DescribeTransactionsResponse", "TransactionState")


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    transaction_state: str = field(metadata={"kafka_type": "string"})
    transaction_timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    #: Epoch milliseconds; -1 when no transaction is open.
    transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    topics: tuple[TopicData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[TransactionState, ...]


def _int64_timestamps(module: str) -> type:
    """kio's response class in ``module`` with every ``datetime_i64`` field
    an int64 (milliseconds, negative allowed); the rest as kio has it."""
    original: type = importlib.import_module(module).__dict__[
        next(name for name in importlib.import_module(module).__dict__
             if name.endswith("Response") and isinstance(
                 importlib.import_module(module).__dict__[name], type))]
    hints = typing.get_type_hints(original)
    fields = []
    for f in dataclasses.fields(original):
        if f.metadata.get("kafka_type") == "datetime_i64":
            fields.append((f.name, i64, field(metadata={"kafka_type": "int64"})))
        else:
            fields.append((f.name, hints[f.name], field(metadata=f.metadata)))
    namespace = {name: getattr(original, name) for name in (
        "__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")}
    made: type = dataclasses.make_dataclass(
        original.__name__, fields, namespace=namespace, frozen=True, slots=True, kw_only=True)
    made.__module__ = __name__
    return made


_TOKEN_RESPONSES: dict[tuple[int, int], str] = {
    (38, 1): "create_delegation_token.v1", (38, 2): "create_delegation_token.v2",
    (38, 3): "create_delegation_token.v3",
    (39, 1): "renew_delegation_token.v1", (39, 2): "renew_delegation_token.v2",
    (40, 1): "expire_delegation_token.v1", (40, 2): "expire_delegation_token.v2",
}

#: (api key, version) -> the response class used instead of kio's.
RESPONSE_OVERRIDES: dict[tuple[int, int], type] = {
    (65, 0): DescribeTransactionsResponse,
    **{key: _int64_timestamps(f"kio.schema.{module}.response")
       for key, module in _TOKEN_RESPONSES.items()},
}
