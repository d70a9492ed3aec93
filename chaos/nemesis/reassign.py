"""The ``reassign`` fault: partition reassignment (KIP-455) while the
workload writes.

``start-reassign {"rf": n}`` moves every partition of the workload topic to
``n`` brokers chosen at random (a random order too, so the preferred leader
moves): replicas are removed and added, leaders move off removed brokers,
added ones copy the log and join the ISR. ``stop-reassign`` is the heal: it
moves every partition back to a random order of ``min(3, nodes)`` brokers and
waits (up to ``settle_s``) for the reassignments to finish and the ISR to be
whole, so the next fault starts from the workload's replication factor. The
completion value records the targets sent, the controller's per-partition
answers and whether the heal finished.

``start-throttled-reassign {"rf": n, "throttle": b}`` is the same move
under replication throttles (KIP-73): first every partition of the topic is
named in ``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas`` (``*``) and the cluster-default
``leader/follower.replication.throttled.rate`` are set to ``b`` bytes per
second, so the replicas being added catch up no faster. Its heal
(``stop-throttled-reassign``) moves back under the same throttles, then
removes them. In-sync replicas are never throttled, so acks=all writes go on
as before; what an added replica has not copied yet it copies slowly.

The requests go to any broker that answers (a broker forwards them to the
active controller), so a fault running elsewhere in the cluster cannot stop
the nemesis, only delay it; a request nobody answers in time is recorded as
such. Reassignment is an operator action, not a failure: an acknowledged
write must survive it exactly as it survives a crash.
"""

from __future__ import annotations

import asyncio
import datetime
import random
from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.alter_partition_reassignments.v1 import request as apr_req
from kio.schema.incremental_alter_configs.v1 import request as iac_req
from kio.schema.list_partition_reassignments.v0 import request as lpr_req
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from chaos.db import DB, node_id
from chaos.history import JSON
from chaos.nemesis.core import ClusterState
from raftlog.net import KafkaProtocolClient
from raftlog.net.errors import ErrorCode, TransportError

_RETRIABLE = (ErrorCode.not_controller, ErrorCode.request_timed_out)
# IncrementalAlterConfigs: resource types and operations (Kafka's ids).
_TOPIC, _BROKER = 2, 4
_SET, _DELETE = 0, 1
_THROTTLED_REPLICAS = ("leader.replication.throttled.replicas",
                       "follower.replication.throttled.replicas")
_THROTTLED_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


class ReassignNemesis:
    fs = frozenset({"start-reassign", "stop-reassign",
                    "start-throttled-reassign", "stop-throttled-reassign"})

    def __init__(
        self, db: DB, rng: random.Random, *, topic: str, partitions: int,
        request_timeout_s: float = 20.0, settle_s: float = 30.0,
    ) -> None:
        self.db = db
        self.rng = rng
        self.topic = topic
        self.partitions = partitions
        self.request_timeout_s = request_timeout_s
        self.settle_s = settle_s

    async def setup(self) -> None:
        return None

    async def invoke(self, f: str, value: JSON, state: ClusterState) -> JSON:
        brokers = sorted(node_id(n) for n in state.nodes)
        starting = f.startswith("start-")
        out: dict[str, JSON] = {}
        if f == "start-throttled-reassign":
            out["throttle"] = int(value["throttle"])
            out["throttle_set"] = await self._throttle(int(value["throttle"]))
        rf = max(1, min(int(value["rf"]), len(brokers))) if starting else min(3, len(brokers))
        targets = {p: self.rng.sample(brokers, rf) for p in range(self.partitions)}
        out["targets"] = {str(p): t for p, t in targets.items()}
        out["answers"] = await self._alter(targets)
        if not starting:
            out["finished"] = await self._settle()
        if f == "stop-throttled-reassign":
            out["throttle_removed"] = await self._throttle(None)
        return out

    async def teardown(self) -> None:
        return None

    # --- requests -------------------------------------------------------------

    async def _alter(self, targets: dict[int, list[int]]) -> JSON:
        """AlterPartitionReassignments: per partition the error name ("NONE"
        when started), or {"unanswered": why} if no broker answered."""
        request = apr_req.AlterPartitionReassignmentsRequest(
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=self.request_timeout_s)),
            topics=(apr_req.ReassignableTopic(
                name=TopicName(self.topic),
                partitions=tuple(
                    apr_req.ReassignablePartition(
                        partition_index=i32(p), replicas=tuple(BrokerId(b) for b in replicas))
                    for p, replicas in sorted(targets.items()))),),
        )
        response, why = await self._first(request, 1, lambda r: r.error_code in _RETRIABLE)
        if response is None:
            return {"unanswered": why}
        if response.error_code != ErrorCode.none:
            return {"error": ErrorCode(response.error_code).name.upper()}
        return {str(int(p.partition_index)): ErrorCode(p.error_code).name.upper()
                for t in response.responses for p in t.partitions}

    async def _throttle(self, rate: int | None) -> JSON:
        """Set (``rate`` bytes/s) or remove (None) the throttles on every
        partition of the topic and the cluster-default rates: per resource
        the error name ("NONE" when done), or {"unanswered": why}."""
        def ops(keys: Sequence[str], value: str) -> tuple[iac_req.AlterableConfig, ...]:
            return tuple(iac_req.AlterableConfig(
                name=key, config_operation=i8(_DELETE if rate is None else _SET),
                value=None if rate is None else value) for key in keys)

        request = iac_req.IncrementalAlterConfigsRequest(
            resources=(
                iac_req.AlterConfigsResource(resource_type=i8(_TOPIC), resource_name=self.topic,
                                             configs=ops(_THROTTLED_REPLICAS, "*")),
                iac_req.AlterConfigsResource(resource_type=i8(_BROKER), resource_name="",
                                             configs=ops(_THROTTLED_RATES, str(rate))),
            ),
            validate_only=False,
        )
        response, why = await self._first(
            request, 1, lambda r: any(x.error_code in _RETRIABLE for x in r.responses))
        if response is None:
            return {"unanswered": why}
        return {("topic" if int(x.resource_type) == _TOPIC else "brokers"):
                ErrorCode(x.error_code).name.upper() for x in response.responses}

    async def _in_progress(self) -> bool | None:
        request = lpr_req.ListPartitionReassignmentsRequest(
            topics=(lpr_req.ListPartitionReassignmentsTopics(
                name=TopicName(self.topic),
                partition_indexes=tuple(i32(p) for p in range(self.partitions))),))
        response, _why = await self._first(request, 0, lambda r: r.error_code in _RETRIABLE)
        if response is None or response.error_code != ErrorCode.none:
            return None
        return any(t.partitions for t in response.topics)

    async def _settle(self) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settle_s
        while loop.time() < deadline:
            if await self._in_progress() is False and await self.db.fully_replicated(self.topic):
                return True
            await asyncio.sleep(0.5)
        return False

    async def _first(
        self, request: Any, version: int, retry: Callable[[Any], bool]
    ) -> tuple[Any | None, str]:
        """The first answer from any broker that ``retry`` does not reject,
        trying them in turn until ``request_timeout_s``; (None, why) after."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_s
        why = "no broker answered"
        while loop.time() < deadline:
            endpoint = self.db.endpoint()
            for host, port in _addresses(endpoint.servers):
                client = KafkaProtocolClient(host, port, client_id="chaos-reassign",
                                             request_timeout_ms=5000, connect_timeout_ms=1000,
                                             security=endpoint.security())
                try:
                    response: Any = await client.send(request, version)
                except TransportError as exc:
                    why = f"{host}:{port}: {exc}"
                    continue
                finally:
                    await client.close()
                if not retry(response):
                    return response, ""
                why = f"{host}:{port}: {ErrorCode(response.error_code).name.upper()}"
            await asyncio.sleep(0.5)
        return None, why


def _addresses(bootstrap: str) -> Sequence[tuple[str, int]]:
    out = []
    for entry in bootstrap.split(","):
        host, _, port = entry.strip().rpartition(":")
        out.append((host, int(port)))
    return out
