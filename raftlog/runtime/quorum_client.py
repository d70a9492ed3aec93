"""`QuorumClient`: propose to a quorum of `raftlog.runtime.node` processes, and
ask it DescribeQuorum. For tests, the benchmark and tools.

Proposals are Produce requests (see `raftlog.runtime.client_api`); the client
follows NOT_LEADER_OR_FOLLOWER leader hints and otherwise tries the nodes in
turn, with a short backoff, until ``deadline_ms``. Many concurrent
`propose` calls are pipelined over ``connections`` connections to the leader.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
from collections.abc import Mapping, Sequence

from kio.schema.describe_quorum.v2 import response as dq_resp
from kio.schema.errors import ErrorCode
from kio.schema.produce.v12 import request as produce_req
from kio.schema.produce.v12 import response as produce_resp
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from raftlog.consensus.messages import DescribeQuorumRequest, DescribeQuorumResponse
from raftlog.net import KafkaProtocolClient
from raftlog.net.errors import TransportError
from raftlog.records import BatchBuilder
from raftlog.runtime import wire

__all__ = ("ProposeFailedError", "QuorumClient")


class ProposeFailedError(Exception):
    """No node committed the proposal before the deadline. ``indefinite`` is
    True when it may still have committed (a timeout, a lost connection)."""

    def __init__(self, message: str, *, indefinite: bool) -> None:
        super().__init__(message)
        self.indefinite = indefinite


class QuorumClient:
    """Client of a quorum whose nodes listen at ``addresses`` (id -> host, port)."""

    def __init__(
        self,
        addresses: Mapping[int, tuple[str, int]],
        *,
        connections: int = 1,
        request_timeout_ms: int = 10_000,
        retry_backoff_ms: int = 10,
    ) -> None:
        self.addresses = dict(addresses)
        self._clients = {
            node_id: [
                KafkaProtocolClient(
                    host,
                    port,
                    client_id=f"quorum-client-{i}",
                    request_timeout_ms=request_timeout_ms,
                    reconnect_backoff_ms=10,
                    reconnect_backoff_max_ms=100,
                )
                for i in range(connections)
            ]
            for node_id, (host, port) in self.addresses.items()
        }
        self._round_robin = itertools.count()
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        self.leader_id: int | None = None

    async def close(self) -> None:
        await asyncio.gather(
            *(c.close() for clients in self._clients.values() for c in clients),
            return_exceptions=True,
        )

    async def propose(self, values: Sequence[bytes], *, deadline_ms: int = 30_000) -> int:
        """Propose ``values`` and return the committed offset of the last one.

        Raises `ProposeFailedError` when the deadline passes first.
        """
        request = _produce_request(values, self._request_timeout_ms)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_ms / 1000
        nodes = sorted(self.addresses)
        attempt = 0
        indefinite = False
        last_error = "no attempt"
        unreachable: dict[int, float] = {}  # node -> loop time until which hints to it are ignored
        while loop.time() < deadline:
            node_id = self.leader_id if self.leader_id is not None else nodes[attempt % len(nodes)]
            attempt += 1
            client = self._pick(node_id)
            try:
                response = await client.send(request)
            except TransportError as exc:
                indefinite = True
                last_error = f"node {node_id}: {exc}"
                self.leader_id = None
                # Peers name a dead leader until they elect another: do not
                # follow that hint into the connection backoff again at once.
                unreachable[node_id] = loop.time() + 1.0
                await asyncio.sleep(self._retry_backoff_ms / 1000)
                continue
            assert isinstance(response, produce_resp.ProduceResponse)
            partition = response.responses[0].partition_responses[0]
            if partition.error_code is ErrorCode.none:
                self.leader_id = node_id
                return int(partition.base_offset) + len(values) - 1
            last_error = f"node {node_id}: {partition.error_code.name} {partition.error_message}"
            if partition.error_code is ErrorCode.request_timed_out:
                indefinite = True
            hint = int(partition.current_leader.leader_id)
            usable = hint in self.addresses and hint != node_id
            if usable and unreachable.get(hint, 0.0) > loop.time():
                usable = False
            self.leader_id = hint if usable else None
            if self.leader_id is None:
                await asyncio.sleep(self._retry_backoff_ms / 1000)
        raise ProposeFailedError(
            f"no commit before the deadline ({last_error})", indefinite=indefinite
        )

    async def describe_quorum(self, node_id: int, version: int = 2) -> DescribeQuorumResponse:
        """DescribeQuorum (KIP-836) sent to ``node_id``. Raises TransportError."""
        payload = wire.encode_request(DescribeQuorumRequest(), destination=node_id)
        answer = await self._pick(node_id).send(payload, version)
        result = wire.decode_response(answer, DescribeQuorumRequest())
        assert isinstance(result, DescribeQuorumResponse)
        return result

    async def describe_quorum_raw(self, node_id: int) -> dq_resp.DescribeQuorumResponse:
        """The kio DescribeQuorum v2 response of ``node_id`` (nodes included)."""
        payload = wire.encode_request(DescribeQuorumRequest(), destination=node_id)
        answer = await self._pick(node_id).send(payload, 2)
        assert isinstance(answer, dq_resp.DescribeQuorumResponse)
        return answer

    def _pick(self, node_id: int) -> KafkaProtocolClient:
        clients = self._clients[node_id]
        return clients[next(self._round_robin) % len(clients)]


def _produce_request(values: Sequence[bytes], timeout_ms: int) -> produce_req.ProduceRequest:
    builder = BatchBuilder()
    for value in values:
        builder.append(value, timestamp_ms=0)
    return produce_req.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
        topic_data=(
            produce_req.TopicProduceData(
                name=TopicName(wire.METADATA_TOPIC),
                partition_data=(
                    produce_req.PartitionProduceData(
                        index=i32(wire.METADATA_PARTITION), records=Records(builder.build())
                    ),
                ),
            ),
        ),
    )
