"""One transactional id's coordinator state and its transition table (KIP-98).

Legal transitions (Kafka ``TransactionState.validPreviousStates``), target
<- allowed sources:

- EMPTY               <- EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT  (InitProducerId)
- ONGOING             <- ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT
                         (AddPartitionsToTxn / AddOffsetsToTxn)
- PREPARE_COMMIT      <- ONGOING                                  (EndTxn commit)
- PREPARE_ABORT       <- ONGOING, PREPARE_EPOCH_FENCE             (EndTxn abort,
                         fencing InitProducerId, transaction timeout)
- COMPLETE_COMMIT     <- PREPARE_COMMIT                           (markers written)
- COMPLETE_ABORT      <- PREPARE_ABORT                            (markers written)
- DEAD                <- EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT   (id expiration)
- PREPARE_EPOCH_FENCE <- ONGOING    (Kafka's transient state while fencing an
                         ongoing transaction; the coordinator here goes
                         straight to PREPARE_ABORT with the bumped epoch in one
                         record, so it is never written, only accepted on load)

`TxnMetadata.transition_to` is the only way to change state and enforces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: An epoch at Short.MAX - 1 cannot be bumped again: a new producer id is needed (KIP-360).
MAX_PRODUCER_EPOCH = 32767

TopicPartition = tuple[str, int]


class TxnState(IntEnum):
    """``TransactionStatus`` values as stored in ``__transaction_state``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


_COMPLETE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: _COMPLETE,
    TxnState.ONGOING: _COMPLETE | {TxnState.ONGOING},
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: _COMPLETE,
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}


class IllegalTxnTransitionError(ValueError):
    """A transition the table forbids: a coordinator bug (tier 3)."""


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """What the coordinator knows about one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    #: When the first partition was added (-1 when no transaction is open).
    txn_start_ms: int = -1
    last_update_ms: int = -1
    # KIP-360: the id/epoch before the last bump, so a retried InitProducerId
    # gets the same answer instead of being fenced. Not persisted (v0 value).
    last_producer_id: int = field(default=NO_PRODUCER_ID, compare=False)
    last_producer_epoch: int = field(default=NO_PRODUCER_EPOCH, compare=False)

    def __post_init__(self) -> None:
        if self.producer_id < 0 or not 0 <= self.producer_epoch <= MAX_PRODUCER_EPOCH:
            raise ValueError(f"{self.transactional_id}: producer {self.producer_id} "
                             f"epoch {self.producer_epoch}")
        if self.timeout_ms <= 0:
            raise ValueError(f"{self.transactional_id}: timeout {self.timeout_ms}")

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_PRODUCER_EPOCH - 1

    def transition_to(self, state: TxnState, **changes: object) -> TxnMetadata:
        """A copy in ``state`` with ``changes``; raises `IllegalTxnTransitionError`."""
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTxnTransitionError(
                f"{self.transactional_id}: {self.state.name} -> {state.name}")
        return replace(self, state=state, **changes)  # type: ignore[arg-type]
