"""`BrokerLifecycle`: the broker's metadata side (implements `BrokerMetadata`).

After Kafka's ``BrokerLifecycleManager`` plus ``AlterPartitionManager`` and
``ForwardingManager`` (design only). It owns the broker's standing with the
active controller; the metadata itself comes from a `MetadataPublisher` fed
by the node's one metadata replay (`data_plane.broker.metadata_publisher`).

States (Kafka's ``BrokerState``), all transitions in `_transition_to`::

    STARTING --registered--> RECOVERY --heartbeat: not fenced--> RUNNING
    RUNNING --heartbeat: fenced (session lost)--> RECOVERY
    RECOVERY / RUNNING --STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED--> STARTING
    STARTING / RECOVERY / RUNNING --controlled_shutdown--> PENDING_CONTROLLED_SHUTDOWN
    any --stop--> SHUTTING_DOWN

- **Registration.** BrokerRegistration v1 with this process's incarnation id
  (a fresh uuid4 per start, so the controller tells a restart from a
  retry), the broker listeners, ``broker.rack`` and the cluster id. Retried
  with backoff until it succeeds; INCONSISTENT_CLUSTER_ID is fatal
  (`BrokerFatalError`). DUPLICATE_BROKER_REGISTRATION (a previous process
  of this id is unfenced and still has a live session: it stopped without
  a controlled shutdown) is retried: it ends when that session expires. The broker epoch is the one the answer grants.
- **Heartbeats** every ``broker.heartbeat.interval.ms`` carry the offset of
  the published image (what this broker has replayed) and ``want_fence``
  until that image includes the broker's own registration (KIP-631: caught
  up). While fenced, a publish that reaches the registration wakes the
  heartbeat at once, so unfencing does not wait a whole interval. The
  controller decides fencing; the answer's ``is_fenced`` is the truth.
- **Controlled shutdown** (`controlled_shutdown`): heartbeats with
  ``want_shut_down`` every ``retry_backoff_ms`` until the controller answers
  ``should_shut_down`` (it has moved leadership off this broker and fenced
  it, so the next process of this id registers at once), bounded by a
  timeout.
- **AlterPartition / forward** go through the `ControllerChannel`;
  AlterPartition is v3 (``NewIsrWithEpochs``, KIP-903) with the topic id
  from the published image.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from kio.schema.alter_partition.v3 import request as ap_req
from kio.schema.alter_partition.v3 import response as ap_resp
from kio.schema.broker_heartbeat.v0 import request as hb_req
from kio.schema.broker_heartbeat.v0 import response as hb_resp
from kio.schema.broker_registration.v3 import request as reg_req
from kio.schema.broker_registration.v3 import response as reg_resp
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i16, i32, i64, u16

from data_plane.replication.types import AlterPartitionRequest, AlterPartitionResponse
from metadata_quorum.features import broker_features
from metadata_quorum.image import MetadataImage
from metadata_quorum.records import Endpoint
from raftlog.net.errors import ErrorCode

from .controller_channel import ControllerChannel, ControllerUnavailableError
from .metadata_api import ImageListener
from .metadata_publisher import MetadataPublisher

__all__ = (
    "BrokerFatalError",
    "BrokerLifecycle",
    "BrokerState",
    "LifecycleConfig",
)

log = logging.getLogger(__name__)

_ALTER_PARTITION_KEY = 56


class BrokerState(Enum):
    """Kafka's ``BrokerState`` (the subset a KRaft broker passes through)."""

    STARTING = "starting"
    RECOVERY = "recovery"  # registered, fenced
    RUNNING = "running"  # registered, unfenced
    PENDING_CONTROLLED_SHUTDOWN = "pending_controlled_shutdown"
    SHUTTING_DOWN = "shutting_down"

    @property
    def kafka_code(self) -> int:
        """Kafka's ``BrokerState`` value (the ``BrokerState`` gauge of
        ``kafka.server:type=KafkaServer``): 1, 2, 3, 6, 7."""
        return _KAFKA_CODES[self]


_KAFKA_CODES: dict[BrokerState, int] = {
    BrokerState.STARTING: 1,
    BrokerState.RECOVERY: 2,
    BrokerState.RUNNING: 3,
    BrokerState.PENDING_CONTROLLED_SHUTDOWN: 6,
    BrokerState.SHUTTING_DOWN: 7,
}


_TRANSITIONS: dict[BrokerState, frozenset[BrokerState]] = {
    BrokerState.STARTING: frozenset({BrokerState.RECOVERY}),
    BrokerState.RECOVERY: frozenset({BrokerState.RUNNING, BrokerState.STARTING}),
    BrokerState.RUNNING: frozenset({BrokerState.RECOVERY, BrokerState.STARTING}),
    BrokerState.PENDING_CONTROLLED_SHUTDOWN: frozenset(),
    BrokerState.SHUTTING_DOWN: frozenset(),
}
# From anywhere but SHUTTING_DOWN: controlled shutdown; from anywhere: stop.


class BrokerFatalError(Exception):
    """The controller refused this broker for good (e.g. INCONSISTENT_CLUSTER_ID)."""


@dataclass(frozen=True, slots=True)
class LifecycleConfig:
    """What the lifecycle needs from ``server.properties``."""

    broker_id: int
    cluster_id: str
    listeners: tuple[Endpoint, ...]
    rack: str | None = None
    heartbeat_interval_ms: int = 2000  # broker.heartbeat.interval.ms
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 5000  # per registration/heartbeat attempt
    alter_partition_timeout_ms: int = 5000
    forward_timeout_ms: int = 30_000
    incarnation_id: uuid.UUID = field(default_factory=uuid.uuid4)
    #: The broker epoch of the last clean shutdown (KIP-966), -1 if unclean
    #: (`data_plane.broker.clean_shutdown`).
    previous_broker_epoch: int = -1

    def __post_init__(self) -> None:
        if self.broker_id < 0:
            raise ValueError("broker id must be >= 0")
        for name in ("heartbeat_interval_ms", "retry_backoff_ms", "request_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")




class BrokerLifecycle:
    """The `BrokerMetadata` of one broker process (see module doc)."""

    def __init__(
        self,
        config: LifecycleConfig,
        channel: ControllerChannel,
        publisher: MetadataPublisher,
    ) -> None:
        self.config = config
        self._channel = channel
        self._publisher = publisher
        self._state = BrokerState.STARTING
        # Granted by the latest successful registration; -1 before.
        self._broker_epoch = -1
        self._fenced = True
        self._want_shutdown = False
        self._shutdown_granted = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._registered = asyncio.Event()
        self._unfenced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None
        self.registrations = 0
        self.heartbeats = 0
        publisher.on_publish(self._on_publish)

    # ---------------------------------------------------------------- BrokerMetadata

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def broker_epoch(self) -> int:
        return self._broker_epoch

    @property
    def image(self) -> MetadataImage:
        return self._publisher.image

    def subscribe(self, listener: ImageListener) -> None:
        self._publisher.subscribe(listener)

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        topic = self.image.topic_by_name(request.topic)
        if topic is None:
            return AlterPartitionResponse(request.change_id, ErrorCode.unknown_topic_or_partition)
        body = ap_req.AlterPartitionRequest(
            broker_id=BrokerId(request.broker_id),
            broker_epoch=i64(request.broker_epoch),
            topics=(
                ap_req.TopicData(
                    topic_id=topic.topic_id,
                    partitions=(
                        ap_req.PartitionData(
                            partition_index=i32(request.partition),
                            leader_epoch=i32(request.leader_epoch),
                            new_isr_with_epochs=tuple(
                                ap_req.BrokerState(
                                    broker_id=BrokerId(pair.broker_id),
                                    broker_epoch=i64(pair.broker_epoch),
                                )
                                for pair in request.new_isr_with_epochs
                            ),
                            leader_recovery_state=i8(0),
                            partition_epoch=i32(request.partition_epoch),
                        ),
                    ),
                ),
            ),
        )
        try:
            response = await self._channel.send(
                body, timeout_ms=self.config.alter_partition_timeout_ms
            )
        except ControllerUnavailableError:
            return AlterPartitionResponse(request.change_id, ErrorCode.request_timed_out)
        assert isinstance(response, ap_resp.AlterPartitionResponse)
        if response.error_code != ErrorCode.none:
            return AlterPartitionResponse(request.change_id, ErrorCode(int(response.error_code)))
        for topic_data in response.topics:
            if topic_data.topic_id != topic.topic_id:
                continue
            for part in topic_data.partitions:
                if int(part.partition_index) != request.partition:
                    continue
                return AlterPartitionResponse(
                    change_id=request.change_id,
                    error=ErrorCode(int(part.error_code)),
                    leader_id=int(part.leader_id),
                    leader_epoch=int(part.leader_epoch),
                    partition_epoch=int(part.partition_epoch),
                    isr=tuple(int(b) for b in part.isr),
                )
        # The controller answered for other partitions only: stale peer input.
        log.warning("AlterPartition answer without %s-%d", request.topic, request.partition)
        return AlterPartitionResponse(request.change_id, ErrorCode.unknown_server_error)

    async def forward(self, api_key: int, request: object) -> object:
        """See `BrokerMetadata.forward`. Raises `ControllerUnavailableError`
        (a `TimeoutError`) when no controller answers within
        ``forward_timeout_ms``, and ValueError when ``api_key`` does not
        match the request entity."""
        declared = getattr(request, "__api_key__", None)
        if declared is None or int(declared) != api_key:
            raise ValueError(f"request {type(request).__name__} is not api key {api_key}")
        return await self._channel.send(
            request,  # type: ignore[arg-type]  # checked above: a kio request entity
            timeout_ms=self.config.forward_timeout_ms,
        )

    # ---------------------------------------------------------------- lifecycle

    @property
    def state(self) -> BrokerState:
        return self._state

    @property
    def fenced(self) -> bool:
        """What the controller said last (True before the first answer)."""
        return self._fenced

    def start(self) -> None:
        """Start registering and heartbeating on the running loop."""
        if self._task is not None:
            raise RuntimeError("lifecycle already started")
        self._task = asyncio.create_task(self._run(), name=f"broker-lifecycle-{self.broker_id}")

    async def wait_registered(self) -> None:
        await self._registered.wait()

    async def wait_unfenced(self) -> None:
        await self._unfenced.wait()

    async def wait_failed(self) -> None:
        """Return once the lifecycle task has ended (see ``failure``)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def controlled_shutdown(self, timeout_ms: int) -> bool:
        """Ask to shut down; True once the controller allows it (leadership
        moved), False after ``timeout_ms`` or if never registered."""
        if self._state is BrokerState.SHUTTING_DOWN:
            return False
        self._want_shutdown = True
        self._state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        log.info("broker %d: controlled shutdown requested", self.broker_id)
        if self._task is None or self._task.done() or self._broker_epoch < 0:
            return False
        self._wakeup.set()
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await self._shutdown_granted.wait()
        except TimeoutError:
            log.warning(
                "broker %d: controlled shutdown not granted within %d ms", self.broker_id, timeout_ms
            )
            return False
        log.info("broker %d: controlled shutdown granted", self.broker_id)
        return True

    async def stop(self) -> None:
        """Stop heartbeating and close the channel."""
        self._state = BrokerState.SHUTTING_DOWN
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._channel.close()

    # ---------------------------------------------------------------- internals

    def _transition_to(self, state: BrokerState) -> None:
        if self._state in (BrokerState.PENDING_CONTROLLED_SHUTDOWN, BrokerState.SHUTTING_DOWN):
            return  # shutting down wins over anything the controller says meanwhile
        if state is self._state:
            return
        if state not in _TRANSITIONS[self._state]:
            raise RuntimeError(f"illegal broker state transition {self._state} -> {state}")
        log.info("broker %d: %s -> %s", self.broker_id, self._state.value, state.value)
        self._state = state

    def _on_publish(self, image: MetadataImage) -> None:
        if self._caught_up(image):
            self._publisher.open_gate()  # see MetadataPublisher.open_gate
            if self._fenced:
                self._wakeup.set()

    def _caught_up(self, image: MetadataImage) -> bool:
        # KIP-631: the broker has caught up once it replayed its own RegisterBroker record.
        return self._broker_epoch >= 0 and image.provenance.last_offset >= self._broker_epoch

    async def _run(self) -> None:
        try:
            while True:
                if self._broker_epoch < 0:
                    if self._want_shutdown:
                        return
                    await self._register()
                    continue
                delay_ms = await self._heartbeat()
                self._wakeup.clear()
                try:
                    async with asyncio.timeout(delay_ms / 1000):
                        await self._wakeup.wait()
                except TimeoutError:
                    pass
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.failure = exc
            log.critical("broker %d lifecycle failed: %r", self.broker_id, exc)

    async def _register(self) -> None:
        config = self.config
        request = reg_req.BrokerRegistrationRequest(
            broker_id=BrokerId(config.broker_id),
            cluster_id=config.cluster_id,
            incarnation_id=config.incarnation_id,
            listeners=tuple(
                reg_req.Listener(
                    name=endpoint.name,
                    host=endpoint.host,
                    port=u16(endpoint.port),
                    security_protocol=i16(int(endpoint.security_protocol)),
                )
                for endpoint in config.listeners
            ),
            features=tuple(
                reg_req.Feature(name=f.name, min_supported_version=i16(f.min_supported),
                                max_supported_version=i16(f.max_supported))
                for f in broker_features()
            ),
            rack=config.rack,
            previous_broker_epoch=i64(config.previous_broker_epoch),
        )
        try:
            response = await self._channel.send(request, timeout_ms=config.request_timeout_ms)
        except ControllerUnavailableError as exc:
            log.info("broker %d: registration: %s", config.broker_id, exc)
            await asyncio.sleep(config.retry_backoff_ms / 1000)
            return
        assert isinstance(response, reg_resp.BrokerRegistrationResponse)
        error = int(response.error_code)
        if error == ErrorCode.inconsistent_cluster_id:
            raise BrokerFatalError(
                f"the controller's cluster id differs from ours ({config.cluster_id})"
            )
        if error == ErrorCode.unsupported_version:
            # The cluster runs a feature level this software cannot (KIP-584):
            # it stays out until the level is lowered or the software upgraded.
            log.warning(
                "broker %d: registration refused: UNSUPPORTED_VERSION: the cluster's "
                "finalized feature levels (raftlog features describe) are outside what "
                "this software supports (%s); retrying", config.broker_id,
                ", ".join(f"{f.name} {f.min_supported}-{f.max_supported}"
                          for f in broker_features()) or "no features")
            await asyncio.sleep(config.retry_backoff_ms / 1000)
            return
        if error != ErrorCode.none:
            log.info("broker %d: registration refused: %s", config.broker_id, _name(error))
            await asyncio.sleep(config.retry_backoff_ms / 1000)
            return
        self._broker_epoch = int(response.broker_epoch)
        self._fenced = True
        self._unfenced.clear()
        self.registrations += 1
        self._transition_to(BrokerState.RECOVERY)
        self._registered.set()
        if self._caught_up(self._publisher.image):  # replayed before the answer came
            self._publisher.open_gate()
        previous = config.previous_broker_epoch
        log.info(
            "broker %d registered with broker epoch %d (incarnation %s; %s)",
            config.broker_id,
            self._broker_epoch,
            config.incarnation_id,
            f"previous broker epoch {previous}: a clean shutdown" if previous >= 0
            else "no clean shutdown recorded",
        )

    async def _heartbeat(self) -> int:
        """Send one heartbeat; return the delay before the next, in ms."""
        config = self.config
        image = self._publisher.image
        want_shutdown = self._want_shutdown
        request = hb_req.BrokerHeartbeatRequest(
            broker_id=BrokerId(config.broker_id),
            broker_epoch=i64(self._broker_epoch),
            current_metadata_offset=i64(image.provenance.last_offset),
            want_fence=not self._caught_up(image) and not want_shutdown,
            want_shut_down=want_shutdown,
        )
        fast_ms = config.retry_backoff_ms
        try:
            response = await self._channel.send(request, timeout_ms=config.request_timeout_ms)
        except ControllerUnavailableError as exc:
            log.info("broker %d: heartbeat: %s", config.broker_id, exc)
            return fast_ms
        assert isinstance(response, hb_resp.BrokerHeartbeatResponse)
        self.heartbeats += 1
        error = int(response.error_code)
        if error in (ErrorCode.stale_broker_epoch, ErrorCode.broker_id_not_registered):
            log.warning(
                "broker %d: heartbeat with epoch %d: %s; registering again",
                config.broker_id,
                self._broker_epoch,
                _name(error),
            )
            self._broker_epoch = -1
            self._fenced = True
            self._unfenced.clear()
            self._transition_to(BrokerState.STARTING)
            return 0
        if error != ErrorCode.none:
            log.info("broker %d: heartbeat refused: %s", config.broker_id, _name(error))
            return fast_ms
        was_fenced, self._fenced = self._fenced, bool(response.is_fenced)
        if want_shutdown and response.should_shut_down:
            # The controller fences a broker as it lets it go (SHUTDOWN_NOW).
            if self._fenced:
                self._unfenced.clear()
            self._shutdown_granted.set()
            return fast_ms
        if self._fenced:
            self._unfenced.clear()
            self._transition_to(BrokerState.RECOVERY)
            if not was_fenced:
                log.warning("broker %d is fenced by the controller", config.broker_id)
        else:
            self._unfenced.set()
            self._transition_to(BrokerState.RUNNING)
            if was_fenced:
                log.info("broker %d is unfenced (epoch %d)", config.broker_id, self._broker_epoch)
        if want_shutdown:
            return fast_ms
        if self._fenced:
            # Heartbeat sooner while fenced: the publish hook wakes us once caught up.
            return min(config.heartbeat_interval_ms, max(fast_ms, 250))
        return config.heartbeat_interval_ms


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def broker_endpoints(
    listeners: Sequence[tuple[str, str, int]],
) -> tuple[Endpoint, ...]:
    """``(name, host, port)`` triples as PLAINTEXT `Endpoint`s (no
    ``listener.security.protocol.map`` support yet)."""
    return tuple(Endpoint(name=name, host=host, port=port) for name, host, port in listeners)
