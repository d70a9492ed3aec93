"""A fake metadata side for broker tests: `FakeMetadataCluster` plays the
controller and the metadata log for N brokers in one process, and
`FakeBrokerMetadata` is one broker's `BrokerMetadata` view of it.

The controller logic is the minimum the data plane needs, with KRaft's
rules: topics are created with replicas assigned round-robin over
registered brokers (leader = first replica, ISR = all); AlterPartition is
validated like ``ReplicationControlManager`` (leader epoch, partition epoch,
leader identity, eligible replicas); AllocateProducerIds hands out
consecutive blocks of `producer_id_block_size` ids; AlterUserScramCredentials, CreateAcls and
DeleteAcls run the real controller commands (`metadata_quorum.controller.scram_control`,
`acl_control`) and replay their records, and so do the delegation-token
requests brokers forward in an Envelope (`forward_envelope`);
fencing a broker (a "crash") removes it
from every ISR it is not the last member of and moves leadership to another
ISR member with a new leader epoch (clean election only). Every change makes
a new immutable `MetadataImage`, published to each broker's listeners on the
event loop, in order, like the real publisher.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Mapping
from typing import Any

from kio.schema.allocate_producer_ids.v0 import request as apid_req
from kio.schema.allocate_producer_ids.v0 import response as apid_resp
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.delete_topics.v6 import request as dt_req
from kio.schema.delete_topics.v6 import response as dt_resp

from data_plane.api.acls import (
    create_request,
    create_response_values,
    delete_request,
    delete_response_values,
)
from data_plane.api.build import build, response_class
from data_plane.api.delegation_tokens import controller_token_handlers
from data_plane.api.envelope import ENVELOPE_KEY, envelope_handler
from data_plane.api.features import update_request, update_response_values
from data_plane.api.scram_credentials import alter_request, alter_response_values
from data_plane.broker.metadata_api import ImageListener
from data_plane.replication.types import AlterPartitionRequest, AlterPartitionResponse
from metadata_quorum.controller.acl_control import create_acls, delete_acls
from metadata_quorum.controller.delegation_token_control import (
    CreateDelegationTokenRequest,
    DelegationTokenSettings,
    RenewDelegationTokenRequest,
    create_delegation_token,
    expire_delegation_token,
    renew_delegation_token,
)
from metadata_quorum.controller.feature_control import update_features
from metadata_quorum.controller.replication_control import MAX_PARTITIONS_PER_BATCH
from metadata_quorum.controller.result import ControllerConfig
from metadata_quorum.controller.scram_control import alter_user_scram_credentials
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.image import (
    BrokerRegistration,
    ConfigResource,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    frozen_mapping,
)
from metadata_quorum.records import MetadataRecord, QuotaEntity, check_quota_entity
from metadata_quorum.records.types import (
    ConfigResourceType,
    Endpoint,
    RemoveUserScramCredentialRecord,
    ScramMechanism,
    UserScramCredentialRecord,
)
from raftlog.net import RequestContext
from raftlog.net.errors import ErrorCode
from raftlog.net.registry import convert_request
from raftlog.security.scram import ScramCredential

__all__ = ("FakeBrokerMetadata", "FakeMetadataCluster")

NO_LEADER = -1


class FakeMetadataCluster:
    """Controller + metadata log for in-process broker tests (see module docstring)."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        #: The controller's ``delegation.token.*`` (tokens off unless a test sets a key).
        self.delegation_tokens = DelegationTokenSettings()
        self._views: dict[int, FakeBrokerMetadata] = {}
        self._next_epoch = 100
        self.alter_partition_calls = 0
        self.producer_id_block_size = 1000
        self.next_producer_id = 0
        self.allocate_producer_ids_calls = 0

    def view(self, broker_id: int) -> FakeBrokerMetadata:
        """Broker ``broker_id``'s `BrokerMetadata` (created on first use)."""
        if broker_id not in self._views:
            self._views[broker_id] = FakeBrokerMetadata(self, broker_id)
        return self._views[broker_id]

    # ---- publishing --------------------------------------------------------------

    def _publish(self, image: MetadataImage) -> None:
        previous, self.image = self.image, image
        for view in self._views.values():
            view._deliver(image, previous)

    def _with_partition(
        self, image: MetadataImage, topic: TopicImage, pid: int, reg: PartitionRegistration
    ) -> MetadataImage:
        parts = dict(topic.partitions)
        parts[pid] = reg
        topics = dict(image.topics)
        topics[topic.topic_id] = topic.with_partitions(frozen_mapping(parts))
        return dataclasses.replace(image, topics=frozen_mapping(topics))

    # ---- brokers -----------------------------------------------------------------

    def register_broker(self, broker_id: int, host: str, port: int,
                        listener_name: str = "PLAINTEXT") -> int:
        """Register (or re-register) an unfenced broker; returns its new broker epoch."""
        self._next_epoch += 1
        reg = BrokerRegistration(
            broker_id=broker_id, epoch=self._next_epoch, incarnation_id=uuid.uuid4(),
            listeners=(Endpoint(listener_name, host, port),), fenced=False,
        )
        brokers = dict(self.image.brokers)
        brokers[broker_id] = reg
        self.view(broker_id).broker_epoch = self._next_epoch
        self._publish(dataclasses.replace(self.image, brokers=frozen_mapping(brokers)))
        return self._next_epoch

    def fence_broker(self, broker_id: int) -> None:
        """The broker stopped heartbeating: fence it, drop it from ISRs, move
        its leaderships to other ISR members (new leader epochs)."""
        brokers = dict(self.image.brokers)
        brokers[broker_id] = dataclasses.replace(brokers[broker_id], fenced=True)
        image = dataclasses.replace(self.image, brokers=frozen_mapping(brokers))
        for topic, pid, reg in list(image.iter_partitions()):
            if broker_id not in reg.isr:
                continue
            topic = image.topics[topic.topic_id]
            isr = tuple(r for r in reg.isr if r != broker_id) or reg.isr
            leader = reg.leader
            epoch = reg.leader_epoch
            if leader == broker_id:
                candidates = [r for r in isr if r != broker_id and image.is_usable(r)]
                leader = candidates[0] if candidates else NO_LEADER
                epoch += 1
            image = self._with_partition(image, topic, pid, dataclasses.replace(
                reg, isr=isr, leader=leader, leader_epoch=epoch,
                partition_epoch=reg.partition_epoch + 1,
            ))
        self._publish(image)

    def elect_leader(self, topic_name: str, pid: int, leader: int) -> None:
        """Move leadership to ``leader`` (an ISR member) with a new leader epoch."""
        topic = self.image.topic_by_name(topic_name)
        assert topic is not None
        reg = topic.partitions[pid]
        if leader not in reg.isr:
            raise ValueError(f"{leader} is not in the ISR {reg.isr}")
        self._publish(self._with_partition(self.image, topic, pid, dataclasses.replace(
            reg, leader=leader, leader_epoch=reg.leader_epoch + 1,
            partition_epoch=reg.partition_epoch + 1,
        )))

    # ---- topics ------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: Mapping[str, str] | None = None) -> ErrorCode:
        """Create ``name`` with round-robin assignment; returns the error, if any."""
        if self.image.topic_by_name(name) is not None:
            return ErrorCode.topic_already_exists
        brokers = sorted(b for b in self.image.brokers if self.image.is_usable(b))
        if partitions < 1:
            return ErrorCode.invalid_partitions
        if replication_factor < 1 or replication_factor > len(brokers):
            return ErrorCode.invalid_replication_factor
        topic_id = uuid.uuid4()
        parts: dict[int, PartitionRegistration] = {}
        for pid in range(partitions):
            replicas = tuple(brokers[(pid + i) % len(brokers)] for i in range(replication_factor))
            parts[pid] = PartitionRegistration(replicas=replicas, isr=replicas, leader=replicas[0])
        topics = dict(self.image.topics)
        topics[topic_id] = TopicImage(name, topic_id, frozen_mapping(parts))
        ids = dict(self.image.topic_ids)
        ids[name] = topic_id
        cfgs = dict(self.image.configs)
        if configs:
            cfgs[ConfigResource(ConfigResourceType.TOPIC, name)] = frozen_mapping(dict(configs))
        self._publish(dataclasses.replace(
            self.image, topics=frozen_mapping(topics), topic_ids=frozen_mapping(ids),
            configs=frozen_mapping(cfgs),
        ))
        return ErrorCode.none

    def set_topic_config(self, name: str, key: str, value: str | None) -> None:
        """A ConfigRecord for topic ``name``: set ``key``, or remove it (None)."""
        self.set_config(ConfigResource(ConfigResourceType.TOPIC, name), key, value)

    def set_broker_config(self, broker: int | None, key: str, value: str | None) -> None:
        """A ConfigRecord for broker ``broker`` (None: the cluster default)."""
        self.set_config(ConfigResource(ConfigResourceType.BROKER,
                                       "" if broker is None else str(broker)), key, value)

    def set_config(self, resource: ConfigResource, key: str, value: str | None) -> None:
        """A ConfigRecord: set ``key`` of ``resource``, or remove it (None)."""
        entries = dict(self.image.configs.get(resource, {}))
        if value is None:
            entries.pop(key, None)
        else:
            entries[key] = value
        cfgs = dict(self.image.configs)
        cfgs[resource] = frozen_mapping(entries)
        self._publish(dataclasses.replace(self.image, configs=frozen_mapping(cfgs)))

    def set_client_quota(self, entity: QuotaEntity, key: str, value: float | None) -> None:
        """A ClientQuotaRecord (KIP-546): set ``key`` of ``entity`` (e.g.
        ``(("client-id", "app"),)``, None names a default), or remove it (None)."""
        entity = check_quota_entity(entity)
        quotas = dict(self.image.client_quotas)
        entries = dict(quotas.get(entity, {}))
        if value is None:
            entries.pop(key, None)
        else:
            entries[key] = float(value)
        if entries:
            quotas[entity] = frozen_mapping(entries)
        else:
            quotas.pop(entity, None)
        self._publish(dataclasses.replace(self.image, client_quotas=frozen_mapping(quotas)))

    def set_scram_credential(
        self, user: str, mechanism: str, credential: ScramCredential | None
    ) -> None:
        """A UserScramCredentialRecord (KIP-554) for ``user`` and ``mechanism``
        (``SCRAM-SHA-256``), or (None) a RemoveUserScramCredentialRecord."""
        kind = ScramMechanism.from_mechanism_name(mechanism)
        record: MetadataRecord
        if credential is None:
            record = RemoveUserScramCredentialRecord(user, kind)
        else:
            record = UserScramCredentialRecord(
                user, kind, credential.salt, credential.stored_key, credential.server_key,
                credential.iterations)
        self._replay((record,))

    def _replay(self, records: tuple[MetadataRecord, ...]) -> None:
        """Publish the image after ``records``, replayed as the brokers' would be."""
        if not records:
            return
        delta = MetadataDelta(self.image)
        for record in records:
            delta.replay(record)
        self._publish(delta.apply(self.image.provenance))

    def delete_topic(self, name: str) -> ErrorCode:
        topic_id = self.image.topic_ids.get(name)
        if topic_id is None:
            return ErrorCode.unknown_topic_or_partition
        topics = dict(self.image.topics)
        del topics[topic_id]
        ids = dict(self.image.topic_ids)
        del ids[name]
        cfgs = dict(self.image.configs)
        cfgs.pop(ConfigResource(ConfigResourceType.TOPIC, name), None)
        self._publish(dataclasses.replace(
            self.image, topics=frozen_mapping(topics), topic_ids=frozen_mapping(ids),
            configs=frozen_mapping(cfgs),
        ))
        return ErrorCode.none

    # ---- controller RPCs ---------------------------------------------------------

    def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        self.alter_partition_calls += 1
        topic = self.image.topic_by_name(request.topic)
        reg = None if topic is None else topic.partitions.get(request.partition)
        if topic is None or reg is None:
            return AlterPartitionResponse(request.change_id, ErrorCode.unknown_topic_or_partition)
        broker = self.image.brokers.get(request.broker_id)
        if broker is None or broker.epoch != request.broker_epoch:
            return AlterPartitionResponse(request.change_id, ErrorCode.stale_broker_epoch)
        if request.leader_epoch != reg.leader_epoch or request.broker_id != reg.leader:
            return AlterPartitionResponse(request.change_id, ErrorCode.fenced_leader_epoch)
        if request.partition_epoch != reg.partition_epoch:
            return AlterPartitionResponse(request.change_id, ErrorCode.invalid_update_version)
        for pair in request.new_isr_with_epochs:
            if pair.broker_id not in reg.replicas or not self.image.is_usable(pair.broker_id):
                return AlterPartitionResponse(request.change_id, ErrorCode.ineligible_replica)
        new = dataclasses.replace(reg, isr=request.new_isr, partition_epoch=reg.partition_epoch + 1)
        self._publish(self._with_partition(self.image, topic, request.partition, new))
        return AlterPartitionResponse(
            request.change_id, ErrorCode.none, leader_id=new.leader,
            leader_epoch=new.leader_epoch, partition_epoch=new.partition_epoch, isr=new.isr,
        )

    def forward(self, api_key: int, request: Any) -> Any:
        if api_key == 19 and isinstance(request, ct_req.CreateTopicsRequest):
            results = []
            # The controller's cap on partitions per request (POLICY_VIOLATION
            # for every topic), as `replication_control.create_topics`.
            too_many = sum(max(int(t.num_partitions), 1)
                           for t in request.topics) > MAX_PARTITIONS_PER_BATCH
            for t in request.topics:
                if too_many:
                    results.append({"name": t.name, "topic_id": uuid.UUID(int=0),
                                    "error_code": ErrorCode.policy_violation,
                                    "num_partitions": -1, "replication_factor": -1})
                    continue
                configs = {c.name: c.value for c in t.configs if c.value is not None}
                error = self.create_topic(str(t.name), int(t.num_partitions),
                                          int(t.replication_factor), configs)
                topic_id = self.image.topic_ids.get(str(t.name), uuid.UUID(int=0))
                results.append({"name": t.name, "topic_id": topic_id, "error_code": error,
                                "num_partitions": t.num_partitions,
                                "replication_factor": t.replication_factor})
            return build(ct_resp.CreateTopicsResponse, {"topics": results})
        if api_key == 20 and isinstance(request, dt_req.DeleteTopicsRequest):
            out = [{"name": t.name, "error_code": self.delete_topic(str(t.name))}
                   for t in request.topics]
            return build(dt_resp.DeleteTopicsResponse, {"responses": out})
        if api_key == 67 and isinstance(request, apid_req.AllocateProducerIdsRequest):
            self.allocate_producer_ids_calls += 1
            start = self.next_producer_id
            self.next_producer_id += self.producer_id_block_size
            return build(apid_resp.AllocateProducerIdsResponse, {
                "error_code": ErrorCode.none, "producer_id_start": start,
                "producer_id_len": self.producer_id_block_size})
        if api_key == 51:  # AlterUserScramCredentials: the real controller command
            result = alter_user_scram_credentials(self.image, alter_request(request))
            self._replay(result.records)
            return build(response_class(request), alter_response_values(result.response))
        if api_key == 30:  # CreateAcls: the real controller command
            created = create_acls(self.image, create_request(request), ControllerConfig(),
                                  next_offset=self.image.provenance.last_offset + 1)
            self._replay(created.records)
            return build(response_class(request), create_response_values(created.response))
        if api_key == 31:  # DeleteAcls: the real controller command
            deleted = delete_acls(self.image, delete_request(request))
            self._replay(deleted.records)
            return build(response_class(request), delete_response_values(deleted.response))
        if api_key == 57:  # UpdateFeatures: the real controller command
            updated = update_features(self.image, update_request(request), ControllerConfig())
            self._replay(updated.records)
            return build(response_class(request), update_response_values(request,
                                                                          updated.response))
        raise ValueError(f"cannot forward api key {api_key}")

    async def forward_envelope(self, request: Any) -> Any:
        """An Envelope (KIP-590) answered as the controller listener answers
        it (`envelope_handler`): a delegation-token request by the real
        controller commands, run on this image; CreateTopics, DeleteTopics
        and CreatePartitions as `forward` answers them bare (no quotas)."""
        config = ControllerConfig(delegation_tokens=self.delegation_tokens)

        async def bare(_: RequestContext, body: Any) -> Any:
            key = int(body.__api_key__)
            if key == 20 and hasattr(body, "topic_names"):  # an older client's, by name
                converted: Any = dt_req.DeleteTopicsRequest(
                    topics=tuple(dt_req.DeleteTopicState(name=n, topic_id=uuid.UUID(int=0))
                                 for n in body.topic_names), timeout=body.timeout)
            else:
                converted = convert_request(body, {19: 7, 20: 6, 37: 3}[key])
            return self.forward(key, converted)

        async def write(command: Any) -> tuple[Any, ErrorCode]:
            now_ms = int(time.time() * 1000)
            if isinstance(command, CreateDelegationTokenRequest):
                result: Any = create_delegation_token(
                    self.image, command, config,
                    next_offset=self.image.provenance.last_offset + 1, now_ms=now_ms)
            elif isinstance(command, RenewDelegationTokenRequest):
                result = renew_delegation_token(self.image, command, config, now_ms=now_ms)
            else:
                result = expire_delegation_token(self.image, command, config, now_ms=now_ms)
            self._replay(result.records)
            return result.response, ErrorCode.none

        context = RequestContext(58, 0, 1, "broker", None, "CONTROLLER")
        handlers = {**controller_token_handlers(write), 19: bare, 20: bare, 37: bare}
        return await envelope_handler(handlers)(context, request)


class FakeBrokerMetadata:
    """One broker's `BrokerMetadata` over a `FakeMetadataCluster`."""

    def __init__(self, cluster: FakeMetadataCluster, broker_id: int) -> None:
        self._cluster = cluster
        self._broker_id = broker_id
        self.broker_epoch = -1
        self._listeners: list[ImageListener] = []
        self._image = cluster.image
        # While True, publishes are not delivered (a broker partitioned from
        # the metadata log); they arrive, in order, when it becomes False.
        self.paused = False
        self._backlog: list[tuple[MetadataImage, MetadataImage]] = []

    @property
    def broker_id(self) -> int:
        return self._broker_id

    @property
    def image(self) -> MetadataImage:
        return self._image

    def subscribe(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    def _deliver(self, image: MetadataImage, previous: MetadataImage) -> None:
        self._backlog.append((image, previous))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._drain()
            return
        loop.call_soon(self._drain)

    def _drain(self) -> None:
        while self._backlog and not self.paused:
            image, _ = self._backlog.pop(0)
            previous, self._image = self._image, image
            for listener in self._listeners:
                listener(image, previous)

    def resume(self) -> None:
        self.paused = False
        self._drain()

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        await asyncio.sleep(0)
        return self._cluster.alter_partition(request)

    async def forward(self, api_key: int, request: object) -> object:
        await asyncio.sleep(0)
        if api_key == ENVELOPE_KEY:
            return await self._cluster.forward_envelope(request)
        return self._cluster.forward(api_key, request)
