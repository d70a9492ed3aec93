"""The node process: ``raftlog server start server.properties``.

The composition root. It reads the config (`data_plane.config`), checks that
every log directory was formatted for this node and cluster
(`data_plane.storage_format`, KAFKA-14077), then starts what
``process.roles`` asks for:

- **controller**: a KRaft voter of ``__cluster_metadata-0`` in
  ``<metadata.log.dir>/__cluster_metadata-0``, whose listener is the
  `QuorumController` (replay on every controller, active on the Raft
  leader; `data_plane.controller_service`). One server on the CONTROLLER
  listener serves the Raft APIs and DescribeQuorum
  (`raftlog.runtime.transport.raft_handlers`) and the controller APIs
  (`data_plane.controller_api`). Controller timers (broker session fencing,
  leader rebalancing) run from a timer task; a snapshot is written every
  ``metadata.log.max.record.bytes.between.snapshots`` committed bytes.
- **broker**: not implemented yet. A node with the broker role logs so at
  start-up and runs only its controller part (a broker-only node exits 1).

Logs go to stderr. SIGTERM/SIGINT: clean shutdown: the active controller
resigns (EndQuorumEpoch, so a successor is elected at once), the driver
stops, the log is flushed and closed (closing the segment log writes its
clean-shutdown marker). Exit 0 after a clean shutdown, 1 if the driver
failed (a broken invariant, a failed fsync), 2 for a bad config or storage.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal

from metadata_quorum.controller.result import ControllerConfig
from raftlog.clock import SystemClock
from raftlog.consensus.config import QuorumConfig
from raftlog.consensus.core import KRaftCore
from raftlog.net import KafkaProtocolServer
from raftlog.runtime import wire
from raftlog.runtime.driver import RaftDriver
from raftlog.runtime.log_adapter import SegmentReplicatedLog
from raftlog.runtime.quorum_state_store import QuorumStateStore
from raftlog.runtime.transport import KafkaTransport, raft_handlers

from .config import NodeConfig
from .controller_api import CONTROLLER_API_VERSIONS, controller_handlers
from .controller_service import ControllerService
from .storage_format import check_formatted

__all__ = ("METADATA_PARTITION_DIR", "controller_config", "quorum_config", "run_node")

log = logging.getLogger("raftlog.server")

METADATA_PARTITION_DIR = "__cluster_metadata-0"


def quorum_config(config: NodeConfig) -> QuorumConfig:
    """The KRaft settings (``controller.quorum.*``) of ``config``."""
    return QuorumConfig(
        voters=frozenset(v.node_id for v in config.voters),
        election_timeout_ms=config.quorum_election_timeout_ms,
        election_backoff_max_ms=config.quorum_election_backoff_max_ms,
        fetch_timeout_ms=config.quorum_fetch_timeout_ms,
        request_timeout_ms=config.quorum_request_timeout_ms,
        append_linger_ms=config.quorum_append_linger_ms,
        retry_backoff_ms=config.quorum_retry_backoff_ms,
        voter_addresses=config.voters,
    )


def controller_config(config: NodeConfig, cluster_id: str) -> ControllerConfig:
    """The controller settings of ``config``."""
    return ControllerConfig(
        cluster_id=cluster_id,
        broker_session_timeout_ms=config.broker_session_timeout_ms,
        unclean_leader_election_enable=config.unclean_leader_election_enable,
        auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
        leader_imbalance_per_broker_percentage=config.leader_imbalance_per_broker_percentage,
        leader_imbalance_check_interval_ms=config.leader_imbalance_check_interval_seconds * 1000,
        default_num_partitions=config.num_partitions,
        default_replication_factor=config.default_replication_factor,
    )


async def run_node(config: NodeConfig) -> int:
    """Run the node until SIGTERM/SIGINT (0) or a driver failure (1).

    Raises `data_plane.storage_format.StorageError` before starting anything
    if a log directory is unformatted or foreign.
    """
    cluster_id = check_formatted(config)
    if config.is_broker:
        log.warning(
            "process.roles includes broker, but the broker role is not implemented yet: "
            "this node runs %s",
            "its controller part only" if config.is_controller else "nothing",
        )
    if not config.is_controller:
        log.error("nothing to run: process.roles=broker needs the broker role (not implemented)")
        return 1

    clock = SystemClock()
    metadata_dir = os.path.join(config.metadata_log_dir, METADATA_PARTITION_DIR)
    os.makedirs(metadata_dir, exist_ok=True)
    replicated_log = SegmentReplicatedLog.open(metadata_dir, clock=clock)
    addresses = config.voter_addresses
    store = QuorumStateStore(metadata_dir, voters=addresses, cluster_id=cluster_id)
    quorum = quorum_config(config)
    core = KRaftCore(
        node_id=config.node_id,
        config=quorum,
        log=replicated_log,
        rng=random.Random(),
        stored=store.read(),
        now_ms=clock.wall_ms(),
    )
    endpoints = {v.node_id: wire.Endpoint(v.node_id, v.host, v.port) for v in config.voters}
    transport = KafkaTransport(
        local_id=config.node_id,
        addresses=addresses,
        request_timeout_ms=quorum.request_timeout_ms,
        fetch_max_wait_ms=quorum.fetch_max_wait_ms,
        cluster_id=cluster_id,
        local_endpoint=endpoints.get(config.node_id),
    )
    service = ControllerService(
        config.node_id,
        controller_config(config, cluster_id),
        config.metadata_max_bytes_between_snapshots,
    )
    driver = RaftDriver(
        core=core,
        log=replicated_log,
        state_store=store,
        transport=transport,
        clock=clock,
        listener=service.listener,
    )
    service.attach(driver)
    handlers = raft_handlers(driver, cluster_id=cluster_id, endpoints=endpoints)
    handlers.update(controller_handlers(service))
    supported = dict(wire.SUPPORTED_VERSIONS)
    supported.update(CONTROLLER_API_VERSIONS)
    listener = config.controller_listener
    server = KafkaProtocolServer(
        listener.host,
        listener.port,
        handlers,
        supported=supported,
        listener_name=listener.name,
        max_in_flight_per_connection=1000,
    )

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    driver.start()
    await server.start()
    log.info(
        "node %d (%s) of cluster %s: controller serving on %s://%s:%d, metadata log %s",
        config.node_id,
        ",".join(sorted(config.process_roles)),
        cluster_id,
        listener.name,
        listener.host,
        server.port,
        metadata_dir,
    )
    background = [
        asyncio.create_task(service.tick_loop(stop), name="controller-tick"),
        asyncio.create_task(service.snapshot_loop(stop), name="metadata-snapshots"),
    ]
    stopped: asyncio.Future[object] = asyncio.ensure_future(stop.wait())
    finished: asyncio.Future[object] = asyncio.ensure_future(driver.wait_stopped())
    await asyncio.wait({stopped, finished}, return_when=asyncio.FIRST_COMPLETED)
    status = 0
    if driver.failure is not None:
        log.critical("raft driver failed: %r; exiting", driver.failure)
        status = 1
    log.info("node %d shutting down", config.node_id)
    for task in background:
        task.cancel()
    await asyncio.gather(*background, return_exceptions=True)
    await driver.stop(resign=status == 0)
    server.close()
    await server.wait_closed()
    replicated_log.close()
    stopped.cancel()
    finished.cancel()
    await asyncio.gather(stopped, finished, return_exceptions=True)
    log.info("node %d stopped", config.node_id)
    return status
