"""`ControllerResult` and `ControllerConfig`: what every command returns and reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from metadata_quorum.records import MetadataRecord

R = TypeVar("R")

#: Kafka's ``controller.max.records.per.batch``: the most records the facade
#: proposes in one batch; larger results are split (KIP-868).
MAX_RECORDS_PER_BATCH = 10_000


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[R]):
    """What a command decided: records to append to the metadata log, and the
    response to send once those records (and every earlier one) are committed.

    Commands never change state; the records change it when replayed.
    """

    records: tuple[MetadataRecord, ...]
    response: R

    def __post_init__(self) -> None:
        if not isinstance(self.records, tuple):
            raise TypeError("records must be a tuple")


@dataclass(frozen=True, slots=True)
class DelegationTokenSettings:
    """The controller's delegation token settings (KIP-48), Kafka's names and defaults.

    - ``secret_key``: ``delegation.token.secret.key`` (Kafka's older name:
      ``delegation.token.master.key``); None or empty turns the feature off
      (every token request is DELEGATION_TOKEN_AUTH_DISABLED, and nothing is
      swept). Every node must have the same one: it keys the token HMACs.
    - ``max_lifetime_ms``: ``delegation.token.max.lifetime.ms`` (7 days), the
      longest a token can live, renewals included.
    - ``expiry_time_ms``: ``delegation.token.expiry.time.ms`` (1 day), how
      long a token lives without a renewal, and the longest renewal.
    - ``expiry_check_interval_ms``:
      ``delegation.token.expiry.check.interval.ms`` (1 hour), how often the
      active controller removes expired tokens.

    Lives here, beside `ControllerConfig`, which holds one; the commands are
    in `delegation_token_control`, which re-exports it.
    """

    secret_key: str | None = None
    max_lifetime_ms: int = 604_800_000
    expiry_time_ms: int = 86_400_000
    expiry_check_interval_ms: int = 3_600_000

    def __post_init__(self) -> None:
        # Kafka's ConfigDef: atLeast(1) for all three.
        if self.max_lifetime_ms < 1:
            raise ValueError("delegation.token.max.lifetime.ms must be >= 1")
        if self.expiry_time_ms < 1:
            raise ValueError("delegation.token.expiry.time.ms must be >= 1")
        if self.expiry_check_interval_ms < 1:
            raise ValueError("delegation.token.expiry.check.interval.ms must be >= 1")

    @property
    def enabled(self) -> bool:
        """Whether a secret key is set: Kafka's tokens need one."""
        return bool(self.secret_key)


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Controller settings, with Kafka's names and defaults.

    - ``cluster_id``: checked against registrations; seeds topic ids.
    - ``broker_session_timeout_ms``: ``broker.session.timeout.ms`` (9000).
    - ``unclean_leader_election_enable``: the static cluster default of
      ``unclean.leader.election.enable`` (false); a cluster-default or
      topic config record overrides it.
    - ``min_insync_replicas``: the static cluster default of
      ``min.insync.replicas`` (1), which KIP-966's ELR rules read when no
      topic or cluster-default config record sets it.
    - ``auto_leader_rebalance_enable``: ``auto.leader.rebalance.enable``.
    - ``leader_imbalance_per_broker_percentage``: (10).
    - ``leader_imbalance_check_interval_ms``: (300 s).
    - ``default_num_partitions`` / ``default_replication_factor``:
      ``num.partitions`` / ``default.replication.factor`` for a CreateTopics
      that passes -1.
    - ``delete_topic_enable``: ``delete.topic.enable`` (true); false
      refuses every DeleteTopics entry TOPIC_DELETION_DISABLED.
    - ``producer_id_block_size``: 1000, as Kafka's ProducerIdsBlock.
    - ``bootstrap_records``: what ``storage format --add-scram`` gave this
      controller (`metadata_quorum.bootstrap`), written once per cluster by
      the first active controller.
    - ``delegation_tokens``: the ``delegation.token.*`` settings
      (`DelegationTokenSettings`; off by default, as in Kafka).
    """

    cluster_id: str = "raftlog-cluster"
    broker_session_timeout_ms: int = 9000
    unclean_leader_election_enable: bool = False
    min_insync_replicas: int = 1
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_ms: int = 300_000
    default_num_partitions: int = 1
    default_replication_factor: int = 1
    delete_topic_enable: bool = True
    producer_id_block_size: int = 1000
    bootstrap_records: tuple[MetadataRecord, ...] = ()
    delegation_tokens: DelegationTokenSettings = DelegationTokenSettings()

    def __post_init__(self) -> None:
        if not self.cluster_id:
            raise ValueError("cluster_id must not be empty")
        if self.broker_session_timeout_ms <= 0:
            raise ValueError("broker.session.timeout.ms must be positive")
        if not 0 <= self.leader_imbalance_per_broker_percentage <= 100:
            raise ValueError("leader.imbalance.per.broker.percentage must be in [0, 100]")
        if self.leader_imbalance_check_interval_ms <= 0:
            raise ValueError("leader.imbalance.check.interval must be positive")
        if self.min_insync_replicas < 1:
            raise ValueError("min.insync.replicas must be >= 1")
        if self.default_num_partitions < 1:
            raise ValueError("num.partitions must be >= 1")
        if self.default_replication_factor < 1:
            raise ValueError("default.replication.factor must be >= 1")
        if self.producer_id_block_size < 1:
            raise ValueError("producer id block size must be >= 1")
