"""The broker's coordinator-side services, one set per broker.

Kafka's ``BrokerServer`` builds these next to the replica manager: the
producer id manager (InitProducerId), the group coordinator runtime, the
transaction coordinator runtime and the creation of the internal topics
they live in. `BrokerApiContext` creates one
`BrokerCoordinators` per broker listener; it starts on first use from a
handler (on the event loop) and closes with the replica manager.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping
from typing import Any

from kio.schema.create_topics.v7 import request as ct_req

from data_plane.api.build import build
from data_plane.broker.group_runtime import GroupCoordinatorRuntime
from data_plane.broker.metadata_api import BrokerMetadata
from data_plane.broker.producer_ids import ProducerIdManager
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.broker.txn_runtime import DEFAULT_ABORT_CHECK_INTERVAL_MS, TxnCoordinatorRuntime
from data_plane.broker.txn_verification import TxnVerifier
from data_plane.groups.model import group_config
from data_plane.groups.partitioning import DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS
from data_plane.txn.coordinator import DEFAULT_MAX_TXN_TIMEOUT_MS
from data_plane.txn.txn_log import (
    DEFAULT_NUM_PARTITIONS,
    GROUP_METADATA_TOPIC,
    TRANSACTION_STATE_TOPIC,
)
from raftlog.net.client import PLAINTEXT_SECURITY, ConnectionSecurity
from raftlog.net.errors import ErrorCode

__all__ = ("BrokerCoordinators",)

log = logging.getLogger(__name__)

CREATE_TOPICS = 19
#: Kafka's default ``offsets.topic.replication.factor`` and
#: ``transaction.state.log.replication.factor``.
INTERNAL_TOPIC_REPLICATION_FACTOR = 3
#: The broker setting that gives each internal topic its replication factor.
_RF_SETTING = {GROUP_METADATA_TOPIC: "offsets.topic.replication.factor",
               TRANSACTION_STATE_TOPIC: "transaction.state.log.replication.factor"}
#: Each internal topic's own configs (Kafka's offsets.topic.segment.bytes and
#: transaction.state.log.segment.bytes defaults; compacted). As in Kafka,
#: ``__transaction_state`` never elects an unclean leader and takes its
#: ``min.insync.replicas`` from ``transaction.state.log.min.isr`` (default 2):
#: a coordinator's answer stands on a record that outlives one broker.
INTERNAL_TOPIC_CONFIGS: Mapping[str, Mapping[str, str]] = {
    GROUP_METADATA_TOPIC: {"cleanup.policy": "compact", "segment.bytes": "104857600"},
    TRANSACTION_STATE_TOPIC: {"cleanup.policy": "compact", "segment.bytes": "104857600",
                              "min.insync.replicas": "2",
                              "unclean.leader.election.enable": "false"},
}
#: The broker settings that override an internal topic's configs.
_CONFIG_SETTINGS: Mapping[str, Mapping[str, str]] = {
    GROUP_METADATA_TOPIC: {"segment.bytes": "offsets.topic.segment.bytes"},
    TRANSACTION_STATE_TOPIC: {"segment.bytes": "transaction.state.log.segment.bytes",
                              "min.insync.replicas": "transaction.state.log.min.isr"},
}


def internal_topic_configs(name: str, static_config: Mapping[str, str]) -> dict[str, str]:
    """The topic configs internal topic ``name`` is created with: its own
    defaults, overridden by the broker settings that name them."""
    configs = dict(INTERNAL_TOPIC_CONFIGS[name])
    for config, setting in _CONFIG_SETTINGS[name].items():
        value = static_config.get(setting)
        if value is not None:
            configs[config] = value
    return configs


class BrokerCoordinators:
    """Coordinator services of one broker (see the module docstring)."""

    def __init__(self, metadata: BrokerMetadata, replicas: ReplicaManager, *,
                 listener_name: str = "PLAINTEXT", security: ConnectionSecurity = PLAINTEXT_SECURITY
                 ) -> None:
        self.metadata = metadata
        self.replicas = replicas
        self.producer_ids = ProducerIdManager(metadata)
        config = replicas.static_config
        self.offsets_topic_partitions = int(config.get(
            "offsets.topic.num.partitions", DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS))
        self.groups = GroupCoordinatorRuntime(
            metadata, replicas, num_partitions=self.offsets_topic_partitions,
            config=group_config(config))
        #: ``group.coordinator.rebalance.protocols``: KIP-848's ConsumerGroupHeartbeat
        #: is served only with "consumer" in it (Kafka 4's default has it).
        self.consumer_protocol_enabled = "consumer" in str(config.get(
            "group.coordinator.rebalance.protocols", "classic,consumer")).split(",")
        self.txn_topic_partitions = int(config.get(
            "transaction.state.log.num.partitions", DEFAULT_NUM_PARTITIONS))
        self.transactions = TxnCoordinatorRuntime(
            metadata, replicas, self.producer_ids, listener_name=listener_name, security=security,
            num_partitions=self.txn_topic_partitions,
            abort_check_interval_ms=int(config.get(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                DEFAULT_ABORT_CHECK_INTERVAL_MS)),
            max_timeout_ms=int(config.get("transaction.max.timeout.ms",
                                          DEFAULT_MAX_TXN_TIMEOUT_MS)))
        self.verifier = TxnVerifier(metadata, replicas, self.transactions_or_start,
                                    listener_name=listener_name, security=security)
        self._started = False
        self._creating: dict[str, asyncio.Task[None]] = {}
        replicas.add_close_hook(self.close)

    def groups_or_start(self) -> GroupCoordinatorRuntime:
        """The group runtime, started on first use (needs the running loop)."""
        self._maybe_start()
        return self.groups

    def transactions_or_start(self) -> TxnCoordinatorRuntime:
        """The transaction coordinator runtime, started on first use."""
        self._maybe_start()
        return self.transactions

    def _maybe_start(self) -> None:
        if not self._started:
            self._started = True
            self.groups.start()
            self.transactions.start()

    async def close(self) -> None:
        for task in self._creating.values():
            task.cancel()
        await self.verifier.close()
        if self._started:
            await self.transactions.close()
            await self.groups.close()
        await self.producer_ids.close()

    def ensure_internal_topic(self, name: str) -> None:
        """Ask the controller (forwarded CreateTopics) to create
        ``__consumer_offsets`` or ``__transaction_state``, with its partition
        count and configs, if the image lacks it; at most one request in
        flight per topic (FindCoordinator, and a Metadata request naming
        one). The caller answers a retriable error meanwhile.

        The replication factor is ``offsets.topic.replication.factor`` /
        ``transaction.state.log.replication.factor`` (default 3), never fewer:
        as Kafka, the topic is not created while fewer brokers are unfenced
        (a topic created smaller would stay so, and with
        ``min.insync.replicas=2`` a factor of 1 is never writable)."""
        partitions = (self.offsets_topic_partitions if name == GROUP_METADATA_TOPIC
                      else self.txn_topic_partitions)
        configs = internal_topic_configs(name, self.replicas.static_config)
        self._maybe_start()
        if self.metadata.image.topic_by_name(name) is not None or name in self._creating:
            return
        rf = int(self.replicas.static_config.get(
            _RF_SETTING.get(name, ""), INTERNAL_TOPIC_REPLICATION_FACTOR))
        live = sum(1 for b in self.metadata.image.brokers.values() if not b.fenced)
        if live < rf:
            log.warning("not creating internal topic %s yet: %d unfenced brokers, "
                        "replication factor %d", name, live, rf)
            return
        request = build(ct_req.CreateTopicsRequest, {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout": datetime.timedelta(milliseconds=30_000), "validate_only": False,
        })

        async def create() -> None:
            try:
                response: Any = await self.metadata.forward(CREATE_TOPICS, request)
                errors = [(t.name, t.error_code, t.error_message) for t in response.topics
                          if t.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists)]
                if errors:
                    log.warning("creating internal topic %s: %s", name, errors)
                else:
                    log.info("created internal topic %s (%d partitions, RF %d)",
                             name, partitions, rf)
            except Exception:
                log.exception("creating internal topic %s failed", name)
            finally:
                self._creating.pop(name, None)

        self._creating[name] = asyncio.create_task(create(), name=f"create-{name}")
