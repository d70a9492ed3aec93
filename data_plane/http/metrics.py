"""Prometheus metrics of one node, with Kafka's dashboard names (served at ``/metrics``).

Kafka's JMX names translated the way the Prometheus JMX exporter's usual
Kafka rules do: ``kafka.server:type=ReplicaManager,name=LeaderCount`` ->
``kafka_server_replicamanager_leadercount``; rates become ``_total``
counters (Prometheus takes the rate: ``rate(..._bytesin_total[1m])``).

Two kinds of metrics, so that nothing runs per record on a hot path:

- **Read at scrape time** (`NodeCollector`): every gauge (partition counts,
  ISR health, controller and Raft state, log sizes) is computed in
  ``collect()`` from the node's live objects (`NodeSources`): the metadata
  image, the replica manager's hosted partitions, the Raft core. Between
  scrapes nothing is counted.
- **Counted per request or per event**, where no state holds the number:
  request latency (one histogram observation per Kafka request, by
  `instrument_handlers`, a wrapper around each handler of a
  `raftlog.net.KafkaProtocolServer`), bytes in/out per topic (summed from
  the batch lengths of a Produce request and a consumer Fetch response:
  per partition, not per record), ISR shrinks/expands (per metadata image
  publish, comparing only topics the image changed), and Raft commit
  latency (per committed metadata batch, `RaftMetricsListener`).

The metric names are listed in ``docs/http.md``.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from metadata_quorum.image import MetadataImage
from raftlog.consensus.ready import CommittedBatch, LeaderAndEpoch, Listener, SnapshotLoad
from raftlog.net import EncodedBody, Handler, RequestContext
from raftlog.net.registry import api_name
from raftlog.records import iter_batches, parse_header

__all__ = (
    "LoopCounter",
    "LoopHistogram",
    "NodeCollector",
    "NodeMetrics",
    "NodeSources",
    "RaftMetricsListener",
    "instrument_handlers",
    "kafka_request_name",
)

# Request latencies in milliseconds (Kafka's TotalTimeMs); long polls reach max.wait.ms.
_LATENCY_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
_COMMIT_BUCKETS_MS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
_PRODUCE, _FETCH = 0, 1
_METADATA_TOPIC_ID = uuid.UUID(int=1)  # __cluster_metadata's fixed id (KIP-595)


@dataclass(slots=True)
class NodeSources:
    """The live objects the scrape-time collector reads (None: the role is absent).

    Filled in by the node as it builds them; every attribute is read on the
    event loop thread only (the HTTP server runs there), so the reads see a
    consistent state between two awaits.
    """

    node_id: int
    cluster_id: str
    # The latest metadata image (the broker's published one, else the controller's committed one).
    image: Callable[[], MetadataImage]
    driver: Any = None  # raftlog.runtime.driver.RaftDriver
    controller: Any = None  # data_plane.controller_service.ControllerService
    replicas: Any = None  # data_plane.broker.replica_manager.ReplicaManager
    min_insync_replicas: int = 1
    # The broker's own lifecycle state as (name, Kafka's BrokerState code),
    # e.g. ("running", 3); None on a controller-only node.
    broker_state: Callable[[], tuple[str, int]] | None = None
    # The node's listeners' connection count (raftlog.net.connection_quotas.ConnectionQuotas).
    connections: Any = None
    # The node's started listeners (raftlog.net.KafkaProtocolServer), for their
    # SASL authentication counts; the node appends broker listeners as they start.
    listeners: Sequence[Any] = ()
    # The broker's group coordinator (data_plane.broker.group_runtime.GroupCoordinatorRuntime).
    groups: Any = None
    # KIP-599 buckets (data_plane.controller_mutation_quota.ControllerMutationQuotas).
    mutation_quotas: Any = None
    # KIP-612 node and listener rates
    # (data_plane.broker.connection_rate_quotas.ConnectionCreationRates).
    creation_rates: Any = None
    extra: dict[str, object] = field(default_factory=dict)


def kafka_request_name(api_key: int, request: object = None) -> str:
    """Kafka's ``request`` label: ``Produce``, ``FetchConsumer``/``FetchFollower``, ..."""
    if api_key == _FETCH and request is not None:
        return "FetchFollower" if _fetch_replica_id(request) >= 0 else "FetchConsumer"
    try:
        return "".join(part.capitalize() for part in api_name(api_key).split("_"))
    except Exception:
        return f"Api{api_key}"


def _fetch_replica_id(request: object) -> int:
    state = getattr(request, "replica_state", None)  # Fetch v15+ (KIP-903)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


class LoopCounter(Collector):
    """A labelled counter updated on the event loop thread only, as every
    per-request metric here is (the HTTP server that scrapes it runs there
    too): `inc` is one dict update, where prometheus_client's `Counter`
    takes a lock and validates on every call. Exposed like a `Counter`
    (``<name>_total`` samples) when the registry collects."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.values: dict[tuple[str, ...], float] = {}
        registry.register(self)

    def inc(self, labels: tuple[str, ...], amount: float) -> None:
        values = self.values
        values[labels] = values.get(labels, 0.0) + amount

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in self.values.items():
            family.add_metric(list(labels), value)
        yield family


class LoopHistogram(Collector):
    """A labelled histogram updated on the event loop thread only (see
    `LoopCounter`): `observe` adds to a bucket count and a sum. Exposed like
    a `Histogram` (``_bucket``, ``_count``, ``_sum``); a value equal to a
    bound counts in that bound's bucket, as there."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 buckets: Sequence[float], registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        # labels -> (per-bucket counts, the last for +Inf; [sum])
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}
        registry.register(self)

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = ([0] * (len(self.bounds) + 1), [0.0])
        series[0][bisect.bisect_left(self.bounds, value)] += 1
        series[1][0] += value

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        names = [floatToGoString(b) for b in self.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        for labels, (counts, total) in self.series.items():
            cumulative = itertools.accumulate(counts)
            family.add_metric(list(labels), list(zip(names, cumulative, strict=True)), total[0])
        yield family


class NodeMetrics:
    """The node's registry: the event counters below plus a `NodeCollector`."""

    def __init__(self, sources: NodeSources) -> None:
        self.sources = sources
        self._names: tuple[MetadataImage, Mapping[Any, str]] | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        # Counted per request: loop-thread metrics (`LoopCounter`).
        self.request_time_ms = LoopHistogram(
            "kafka_network_requestmetrics_totaltimems",
            "Time from receiving a Kafka request to its response being ready, in ms.",
            ["request", "listener"], _LATENCY_BUCKETS_MS, self.registry,
        )
        self.bytes_in = LoopCounter(
            "kafka_server_brokertopicmetrics_bytesin",
            "Record batch bytes appended by clients (Produce), per topic.",
            ["topic"], self.registry,
        )
        self.messages_in = LoopCounter(
            "kafka_server_brokertopicmetrics_messagesin",
            "Records appended by clients (Produce), per topic.",
            ["topic"], self.registry,
        )
        self.bytes_out = LoopCounter(
            "kafka_server_brokertopicmetrics_bytesout",
            "Record batch bytes sent to consumers (Fetch, not replication), per topic.",
            ["topic"], self.registry,
        )
        self.replication_bytes_out = LoopCounter(
            "kafka_server_brokertopicmetrics_replicationbytesout",
            "Record batch bytes sent to follower replicas, per topic.",
            ["topic"], self.registry,
        )
        self.isr_shrinks = Counter(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks of partitions this broker leads (from published metadata).",
            registry=self.registry,
        )
        self.isr_expands = Counter(
            "kafka_server_replicamanager_isrexpands",
            "ISR expands of partitions this broker leads (from published metadata).",
            registry=self.registry,
        )
        self.commit_latency_ms = Histogram(
            "kafka_server_raftmetrics_commit_latency_ms",
            "Metadata log: time from the leader's append (batch timestamp) to commit, in ms.",
            buckets=_COMMIT_BUCKETS_MS, registry=self.registry,
        )
        self.collector = NodeCollector(sources)
        self.registry.register(self.collector)

    # ---- ISR changes, per image publish ------------------------------------

    def on_image(self, image: MetadataImage, previous: MetadataImage | None) -> None:
        """A `data_plane.broker.metadata_api.ImageListener`: count the ISR
        changes of partitions this broker leads in both images. Topics the
        image shares with the previous one (copy-on-write) are skipped."""
        if previous is None:
            return
        me = self.sources.node_id
        for topic_id, topic in image.topics.items():
            old_topic = previous.topics.get(topic_id)
            if old_topic is None or old_topic is topic:
                continue
            for index, partition in topic.partitions.items():
                old = old_topic.partitions.get(index)
                if old is None or partition.leader != me or old.leader != me:
                    continue
                before, after = set(old.isr), set(partition.isr)
                if after < before:
                    self.isr_shrinks.inc()
                elif after > before:
                    self.isr_expands.inc()

    # ---- bytes per topic, per request ----------------------------------------

    def count_produce(self, request: Any) -> None:
        for topic in request.topic_data:
            name = str(topic.name)
            size = records = 0
            for part in topic.partition_data:
                data = part.records
                if not data:
                    continue
                size += len(data)
                records += _record_count(data)
            if size:
                self.bytes_in.inc((name,), size)
                self.messages_in.inc((name,), records)

    def count_fetch(self, request: Any, response: Any) -> None:
        counter = self.replication_bytes_out if _fetch_replica_id(request) >= 0 else self.bytes_out
        names: Mapping[Any, str] | None = None
        if isinstance(response, EncodedBody):  # hand-encoded: sizes come with it
            sizes = [(label, size) for label, size in response.record_bytes]
        else:
            sizes = [(label if (label := getattr(topic, "topic", None)) is not None
                      else topic.topic_id,
                      sum(len(p.records) for p in topic.partitions if p.records))
                     for topic in getattr(response, "responses", ())]
        for name, size in sizes:
            if not size:
                continue
            if not isinstance(name, str):  # Fetch v13+: topics by id
                if names is None:
                    names = self._topic_names()
                name = names.get(name, str(name))
            counter.inc((str(name),), size)

    def _topic_names(self) -> Mapping[Any, str]:
        """Topic id -> name in the current image (rebuilt when the image changes)."""
        image = self.sources.image()
        cached = self._names
        if cached is None or cached[0] is not image:
            names: dict[Any, str] = {t.topic_id: t.name for t in image.topics.values()}
            names[_METADATA_TOPIC_ID] = "__cluster_metadata"  # KRaft's Fetch
            cached = self._names = (image, names)
        return cached[1]


def _record_count(data: bytes) -> int:
    count = 0
    try:
        for header, _ in iter_batches(data, validate_crc=False):
            count += header.records_count
    except Exception:  # a malformed produce: the handler answers it; count what parsed
        pass
    return count


def instrument_handlers(
    handlers: Mapping[int, Handler], metrics: NodeMetrics
) -> dict[int, Handler]:
    """``handlers`` with each one timed into ``kafka_network_requestmetrics_totaltimems``
    (and Produce/Fetch counted into the per-topic byte counters)."""
    pending = _PendingAccounts(metrics)
    return {key: _timed(key, handler, pending) for key, handler in handlers.items()}


class _PendingAccounts:
    """Requests answered since the last loop turn, accounted together.

    Accounting runs after the responses are written (a produce's answer and a
    follower's fetch answer are on the acks=all critical path), in one
    callback per loop turn rather than one per request."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self.metrics = metrics
        self._items: list[tuple[int, str, str, float, Any, Any]] = []

    def add(self, api_key: int, plain_name: str, listener: str, elapsed_ms: float,
            request: Any, response: Any) -> None:
        items = self._items
        if not items:
            asyncio.get_running_loop().call_soon(self._flush)
        items.append((api_key, plain_name, listener, elapsed_ms, request, response))

    def _flush(self) -> None:
        items, self._items = self._items, []
        metrics = self.metrics
        for api_key, name, listener, elapsed_ms, request, response in items:
            try:
                if api_key == _FETCH:
                    name = kafka_request_name(api_key, request)
                metrics.request_time_ms.observe((name, listener), elapsed_ms)
                if api_key == _PRODUCE:
                    metrics.count_produce(request)
                elif api_key == _FETCH:
                    metrics.count_fetch(request, response)
            except Exception:  # metrics never fail a request
                pass


def _timed(api_key: int, handler: Handler, pending: _PendingAccounts) -> Handler:
    plain_name = kafka_request_name(api_key)
    add = pending.add

    async def timed(context: RequestContext, request: Any) -> Any:
        start = time.perf_counter()
        response = await handler(context, request)
        add(api_key, plain_name, context.listener_name,
            (time.perf_counter() - start) * 1000, request, response)
        return response

    return timed


class RaftMetricsListener:
    """Wraps the driver's `Listener`: observes the commit latency of each
    committed batch while this node leads (now minus the batch's max
    timestamp, which the leader set at append), then delegates."""

    def __init__(self, inner: Listener, metrics: NodeMetrics,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._inner = inner
        self._metrics = metrics
        self._wall_ms = wall_ms
        self.is_leader: Callable[[], bool] = lambda: False

    def handle_commit(self, batch: CommittedBatch) -> None:
        if not batch.is_control and self.is_leader():
            try:
                appended_ms = parse_header(batch.data).max_timestamp
            except Exception:
                appended_ms = -1
            if appended_ms > 0:
                self._metrics.commit_latency_ms.observe(max(0, self._wall_ms() - appended_ms))
        self._inner.handle_commit(batch)

    def handle_load_snapshot(self, snapshot: SnapshotLoad) -> None:
        self._inner.handle_load_snapshot(snapshot)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self._inner.handle_leader_change(leader)


class NodeCollector(Collector):
    """Every gauge, read from `NodeSources` at scrape time."""

    def __init__(self, sources: NodeSources) -> None:
        self.sources = sources
        self._append_base: int | None = None

    def start_counting_appends(self, log_end_offset: int) -> None:
        """Count ``append_records`` from ``log_end_offset`` (the node calls it at start)."""
        self._append_base = log_end_offset

    def collect(self) -> Iterator[Any]:
        yield from self._broker()
        yield from self._controller()
        yield from self._controller_mutations()
        yield from self._raft()
        yield from self._connections()
        yield from self._groups()

    def _groups(self) -> Iterable[Any]:
        """Kafka's ``group-coordinator-metrics``: the groups this broker
        coordinates now (the offsets partitions it leads), by protocol and
        state, and the KIP-848 group epoch bumps it wrote."""
        runtime = self.sources.groups
        if runtime is None:
            return
        count = GaugeMetricFamily(
            "kafka_server_group_coordinator_metrics_group_count",
            "Groups this broker coordinates, by protocol (classic, consumer).",
            labels=["protocol"])
        classic = GaugeMetricFamily(
            "kafka_server_group_coordinator_metrics_classic_group_count",
            "Classic groups this broker coordinates, by state.", labels=["state"])
        consumer = GaugeMetricFamily(
            "kafka_server_group_coordinator_metrics_consumer_group_count",
            "KIP-848 consumer groups this broker coordinates, by state.", labels=["state"])
        classic_states: dict[str, int] = {}
        consumer_states: dict[str, int] = {}
        rebalances = 0
        migrations = {"upgrade": 0, "downgrade": 0}
        for shard in runtime.shards():
            rebalances += shard.consumer_group_rebalances
            for direction, n in shard.group_migrations.items():
                migrations[direction] += n
            for group_id in shard.group_ids():
                group = shard.consumer_group(group_id)
                if group is not None:
                    state = group.state.value
                    consumer_states[state] = consumer_states.get(state, 0) + 1
                elif (classic_group := shard.group(group_id)) is not None:
                    state = classic_group.state.value
                    classic_states[state] = classic_states.get(state, 0) + 1
        count.add_metric(["classic"], sum(classic_states.values()))
        count.add_metric(["consumer"], sum(consumer_states.values()))
        for state, n in sorted(classic_states.items()):
            classic.add_metric([state], n)
        for state, n in sorted(consumer_states.items()):
            consumer.add_metric([state], n)
        yield count
        yield classic
        yield consumer
        yield CounterMetricFamily(
            "kafka_server_group_coordinator_metrics_consumer_group_rebalance",
            "Group epoch bumps of KIP-848 consumer groups written by the shards loaded here "
            "(members joining or leaving, subscription or topic changes); it restarts when "
            "an offsets partition is loaded again.", value=rebalances)
        migrated = CounterMetricFamily(
            "raftlog_group_coordinator_group_migrations",
            "KIP-848 online migrations made by the shards loaded here: upgrade (a classic "
            "group became a consumer group), downgrade (back); it restarts when an offsets "
            "partition is loaded again.", labels=["direction"])
        for direction, n in sorted(migrations.items()):
            migrated.add_metric([direction], n)
        yield migrated

    def _connections(self) -> Iterable[Any]:
        quotas = self.sources.connections
        if quotas is None:
            return
        yield GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "Open connections over all of the node's listeners.", value=quotas.open)
        yield CounterMetricFamily(
            "kafka_server_socket_server_metrics_connections_refused",
            "Connections closed as they were accepted: over max.connections.per.ip "
            "(or its override) or max.connections.", value=quotas.refused)
        succeeded = CounterMetricFamily(
            "kafka_server_socket_server_metrics_successful_authentication",
            "Connections that authenticated (a SASL login, or a TLS client on an SSL "
            "listener), per listener.",
            labels=["listener"])
        failed = CounterMetricFamily(
            "kafka_server_socket_server_metrics_failed_authentication",
            "Authentications refused (wrong SASL credentials, unknown mechanism, a TLS "
            "certificate no ssl.principal.mapping.rules rule maps), per listener.",
            labels=["listener"])
        reauthenticated = CounterMetricFamily(
            "kafka_server_socket_server_metrics_successful_reauthentication",
            "SASL logins on connections already authenticated, as their sessions end "
            "(KIP-368, connections.max.reauth.ms), per listener.",
            labels=["listener"])
        for server in self.sources.listeners:
            if server.authenticates or server.tls:
                succeeded.add_metric([server.listener_name], server.authentications)
                failed.add_metric([server.listener_name], server.failed_authentications)
            if server.authenticates:
                reauthenticated.add_metric([server.listener_name], server.reauthentications)
        yield succeeded
        yield failed
        yield reauthenticated
        rates = self.sources.creation_rates
        if rates is not None:
            waits = GaugeMetricFamily(
                "kafka_server_socket_server_metrics_connection_accept_throttle_time",
                "Average wait (ms) of a new connection for max.connection.creation.rate "
                "or its listener's rate, over the quota window, per listener.",
                labels=["listener"])
            for listener, wait_ms in sorted(rates.average_wait_ms().items(),
                                            key=lambda item: str(item[0])):
                waits.add_metric([str(listener)], wait_ms)
            yield waits

    # ---- broker -----------------------------------------------------------------

    def _broker(self) -> Iterable[Any]:
        if self.sources.broker_state is not None:
            yield GaugeMetricFamily(
                "kafka_server_kafkaserver_brokerstate",
                "The broker's state, as Kafka numbers it: 1 starting, 2 recovery (registered, "
                "fenced), 3 running (unfenced), 6 pending controlled shutdown, 7 shutting down.",
                value=self.sources.broker_state()[1])
        replicas = self.sources.replicas
        if replicas is None:
            return
        min_isr = self.sources.min_insync_replicas
        leaders = under = under_min = 0
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of the partition's log on disk.",
                                 labels=["topic", "partition"])
        leo = GaugeMetricFamily("kafka_log_log_logendoffset", "The partition's log end offset.",
                                labels=["topic", "partition"])
        lso = GaugeMetricFamily("kafka_log_log_logstartoffset",
                                "The partition's log start offset.", labels=["topic", "partition"])
        hw = GaugeMetricFamily("kafka_cluster_partition_highwatermark",
                               "The partition's high watermark as this replica knows it.",
                               labels=["topic", "partition"])
        under_one = GaugeMetricFamily(
            "kafka_cluster_partition_underreplicated",
            "1 if this broker leads the partition and its ISR is smaller than the replica set "
            "(replicas being added by a reassignment not counted), else 0.",
            labels=["topic", "partition"])
        hosted = dict(replicas.partitions)
        # Reassignments in progress (KIP-455), from the broker's metadata: a
        # replica being added does not count toward the replication factor
        # until it is in sync (Kafka's rule for UnderReplicatedPartitions).
        adding: dict[tuple[str, int], int] = {}
        image = getattr(getattr(replicas, "metadata", None), "image", None)
        if image is not None:
            for topic_image, index, reg in image.iter_partitions():
                if reg.adding_replicas or reg.removing_replicas:
                    adding[(topic_image.name, index)] = len(reg.adding_replicas)
        reassigning = 0
        for (topic, index), entry in sorted(hosted.items()):
            core = entry.partition
            labels = [topic, str(index)]
            size.add_metric(labels, core.log.size_in_bytes)
            leo.add_metric(labels, core.log_end_offset)
            lso.add_metric(labels, core.log.log_start_offset)
            hw.add_metric(labels, core.high_watermark)
            partition_under = False
            if core.is_leader:
                leaders += 1
                isr = len(core.isr)
                being_added = adding.get((topic, index))
                if being_added is not None:
                    reassigning += 1
                partition_under = isr < len(core.replicas) - (being_added or 0)
                under += partition_under
                under_min += isr < max(min_isr, getattr(core.config, "min_insync_replicas", 1))
            under_one.add_metric(labels, 1.0 if partition_under else 0.0)
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount",
                                "Replicas hosted by this broker.", value=len(hosted))
        yield GaugeMetricFamily("kafka_server_replicamanager_leadercount",
                                "Partitions this broker leads.", value=leaders)
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions this broker leads whose ISR is smaller than the replica set (replicas "
            "being added by a reassignment not counted).",
            value=under)
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_reassigningpartitions",
            "Partitions this broker leads that are being reassigned (KIP-455).",
            value=reassigning)
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Partitions this broker leads whose ISR is below min.insync.replicas.",
            value=under_min)
        yield size
        yield leo
        yield lso
        yield hw
        yield under_one
        yield from self._cleaner(replicas)
        yield from self._client_quotas(replicas)
        yield from self._replication_quotas(replicas)

    @staticmethod
    def _replication_quotas(replicas: Any) -> Iterable[Any]:
        """Kafka's ``kafka.server:type=LeaderReplication`` / ``FollowerReplication``
        ``byte-rate``: the measured rate of throttled partitions' replication
        bytes (KIP-73, `data_plane.broker.replication_quotas`), and the bound."""
        quotas = getattr(replicas, "replication_quotas", None)
        if quotas is None:
            return
        now_ms = replicas.now_ms()
        for manager in (quotas.leader, quotas.follower):
            what = ("sent to followers" if manager.name == "leader"
                    else "fetched from leaders")
            yield GaugeMetricFamily(
                f"kafka_server_{manager.name}_replication_byte_rate",
                f"Record bytes per second of throttled partitions {what}, over the "
                "replication quota window.",
                value=manager.rate(now_ms))
            yield GaugeMetricFamily(
                f"kafka_server_{manager.name}_replication_throttled_rate",
                f"{manager.name}.replication.throttled.rate in effect (bytes per second); "
                "-1 when unbounded.",
                value=-1 if manager.bound is None else manager.bound)
        moves = quotas.alter_log_dirs
        yield GaugeMetricFamily(
            "kafka_server_alter_log_dirs_byte_rate",
            "Bytes per second copied by log-dir moves (AlterReplicaLogDirs), over the "
            "replication quota window.",
            value=moves.rate(now_ms))
        yield GaugeMetricFamily(
            "kafka_server_alter_log_dirs_io_max_bytes_per_second",
            "replica.alter.log.dirs.io.max.bytes.per.second in effect; -1 when unbounded.",
            value=-1 if moves.bound is None else moves.bound)

    @staticmethod
    def _client_quotas(replicas: Any) -> Iterable[Any]:
        """Kafka's per-client quota metrics (``kafka.server:type=Produce`` /
        ``type=Fetch``, tags user and client-id), one series per quota
        sensor (`data_plane.broker.client_quotas`): a user-level quota's
        sensor has client_id "", a client-id one user "". Read from the
        sensors now; nothing is counted for them on the request path."""
        quotas = getattr(replicas, "client_quotas", None)
        if quotas is None:
            return
        now_ms = replicas.now_ms()
        for kind, manager, what in (("produce", quotas.produce, "Produce request"),
                                    ("fetch", quotas.fetch, "consumer Fetch response record")):
            rate = GaugeMetricFamily(
                f"kafka_server_{kind}_byte_rate",
                f"{what} bytes per second of a client under a quota, over the quota window.",
                labels=["user", "client_id"])
            throttle = GaugeMetricFamily(
                f"kafka_server_{kind}_throttle_time",
                "Average throttle time (ms) of a client's throttled answers over the quota "
                "window; 0 when none was throttled.",
                labels=["user", "client_id"])
            for (user, client_id), byte_rate, throttle_ms in manager.snapshot(now_ms):
                rate.add_metric([user, client_id], byte_rate)
                throttle.add_metric([user, client_id], throttle_ms)
            yield rate
            yield throttle
        # KIP-124 (Kafka's type=Request request-time and throttle-time).
        request_time = GaugeMetricFamily(
            "kafka_server_request_request_time",
            "Percent of the broker's request loop a client under a request quota used, "
            "over the quota window.", labels=["user", "client_id"])
        request_throttle = GaugeMetricFamily(
            "kafka_server_request_throttle_time",
            "Average throttle time (ms) of a client's answers throttled by its request "
            "quota over the quota window; 0 when none was.", labels=["user", "client_id"])
        for (user, client_id), percent, throttle_ms in quotas.request.snapshot(now_ms):
            request_time.add_metric([user, client_id], percent)
            request_throttle.add_metric([user, client_id], throttle_ms)
        yield request_time
        yield request_throttle

    @staticmethod
    def _cleaner(replicas: Any) -> Iterable[Any]:
        cleaner = getattr(replicas, "cleaner", None)
        if cleaner is None:
            return
        yield GaugeMetricFamily(
            "kafka_log_logcleanermanager_max_dirty_percent",
            "The largest dirty ratio (percent) among this broker's compacted replicas at the "
            "cleaner's last look.", value=100.0 * cleaner.max_dirty_ratio)
        last = cleaner.last_result
        recopy = 100.0 * last.bytes_written / last.bytes_read if last and last.bytes_read else 0.0
        yield GaugeMetricFamily(
            "kafka_log_logcleaner_cleaner_recopy_percent",
            "Bytes the last cleaning pass wrote, as a percent of the bytes it read.", value=recopy)
        yield GaugeMetricFamily(
            "kafka_log_logcleaner_max_clean_time_secs",
            "How long the last cleaning pass took.", value=cleaner.last_duration_ms / 1000.0)
        for name, doc, total in (
            ("passes", "Cleaning passes completed.", cleaner.passes),
            ("bytes_read", "Bytes the cleaner read.", cleaner.bytes_read),
            ("bytes_written", "Bytes the cleaner wrote.", cleaner.bytes_written),
            ("records_removed", "Records compaction removed.", cleaner.records_removed),
        ):
            yield CounterMetricFamily(f"raftlog_log_cleaner_{name}", doc, value=total)

    # ---- controller -------------------------------------------------------------

    def _controller(self) -> Iterable[Any]:
        service = self.sources.controller
        if service is None:
            return
        active = service.active_controller_id == self.sources.node_id
        image: MetadataImage = service.controller.committed_image
        fenced = sum(1 for b in image.brokers.values() if b.fenced)
        offline = sum(1 for _, _, p in image.iter_partitions() if p.leader < 0)
        partitions = sum(len(t.partitions) for t in image.topics.values())
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 on the active controller, else 0.", value=int(active))
        # Kafka reports the cluster-wide counts on the active controller only.
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a leader (active controller only; 0 elsewhere).",
            value=offline if active else 0)
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_fencedbrokercount",
            "Registered brokers that are fenced (active controller only).",
            value=fenced if active else 0)
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activebrokercount",
            "Registered brokers that are unfenced (active controller only).",
            value=len(image.brokers) - fenced if active else 0)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_globaltopiccount",
                                "Topics (active controller only).",
                                value=len(image.topics) if active else 0)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_globalpartitioncount",
                                "Partitions (active controller only).",
                                value=partitions if active else 0)

    def _controller_mutations(self) -> Iterable[Any]:
        """Kafka's ``kafka.server:type=ControllerMutation`` metrics (tags user
        and client-id), one series per KIP-599 bucket this controller keeps
        (none but on the active one): its tokens, partitions created or
        deleted per second and average throttle time, over the quota window."""
        quotas = self.sources.mutation_quotas
        if quotas is None:
            return
        labels = ["user", "client_id"]
        tokens = GaugeMetricFamily(
            "kafka_server_controllermutation_tokens",
            "Partitions a client may still create or delete at once (below zero: "
            "throttled until it refills to zero).", labels=labels)
        rate = GaugeMetricFamily(
            "kafka_server_controllermutation_mutation_rate",
            "Partitions per second a client created or deleted, over the quota window.",
            labels=labels)
        throttle = GaugeMetricFamily(
            "kafka_server_controllermutation_throttle_time",
            "Average throttle time (ms) of a client's throttled topics over the quota "
            "window; 0 when none was.", labels=labels)
        for (user, client_id), left, per_s, throttle_ms in quotas.snapshot(
                int(time.time() * 1000)):
            tokens.add_metric([user, client_id], left)
            rate.add_metric([user, client_id], per_s)
            throttle.add_metric([user, client_id], throttle_ms)
        yield tokens
        yield rate
        yield throttle

    # ---- raft -------------------------------------------------------------------

    def _raft(self) -> Iterable[Any]:
        driver = self.sources.driver
        if driver is None:
            return
        core = driver.core
        leader = core.quorum.leader_id()
        end = core.log.end_offset()
        if self._append_base is None:
            self._append_base = end
        yield GaugeMetricFamily("kafka_server_raftmetrics_current_leader",
                                "The metadata quorum leader's id, -1 if unknown.",
                                value=-1 if leader is None else leader)
        yield GaugeMetricFamily("kafka_server_raftmetrics_current_epoch",
                                "The metadata quorum's epoch.", value=core.epoch)
        yield GaugeMetricFamily("kafka_server_raftmetrics_high_watermark",
                                "The metadata log's high watermark.", value=core.high_watermark)
        yield GaugeMetricFamily("kafka_server_raftmetrics_log_end_offset",
                                "The metadata log's end offset.", value=end)
        state = GaugeMetricFamily("kafka_server_raftmetrics_current_state",
                                  "1 for this node's Raft role.", labels=["state"])
        state.add_metric([core.role_name.lower()], 1)
        yield state
        # Records appended to the local metadata log since start (rate() = Kafka's
        # append-records-rate; on a follower it counts replicated records).
        yield CounterMetricFamily(
            "kafka_server_raftmetrics_append_records",
            "Records appended to the local metadata log since this process started.",
            value=max(0, end - self._append_base))
