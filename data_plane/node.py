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
- **broker**: the metadata side of `data_plane.broker`. One metadata log
  per node: a broker-only node is a Raft *observer* of
  ``__cluster_metadata-0`` (same directory, its own non-voter core), whose
  `BrokerMetadataListener` replays into a `MetadataLoader` and publishes
  images; a combined node is already a voter, so its driver's listener is
  `CombinedMetadataListener`: the controller replays (its loader is the
  node's only one) and the broker publishes the controller's committed
  image. `BrokerLifecycle` registers with the active controller and
  heartbeats (`data_plane.broker.lifecycle`). The data side (partitions,
  replica fetchers, the Kafka API: `data_plane.broker.data_side`) attaches
  through `BrokerServices` and serves on the broker listeners (every
  listener not in ``controller.listener.names``).

Logs go to stderr. SIGTERM/SIGINT: clean shutdown: a broker first runs
controlled shutdown (heartbeats with want_shut_down until the controller
has moved its leadership away, at most ``broker.session.timeout.ms``), then
its data side's ``on_stop`` hooks run; the active controller
resigns (EndQuorumEpoch, so a successor is elected at once), the driver
stops, the log is flushed and closed (closing the segment log writes its
clean-shutdown marker). Exit 0 after a clean shutdown, 1 if the driver
failed (a broken invariant, a failed fsync) or a log dir failed (a data
write raised: disk full or failing; Kafka's "Shutdown broker because all
log dirs ... have failed"), 2 for a bad config or storage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from metadata_quorum.bootstrap import BootstrapError, read_bootstrap
from metadata_quorum.controller.result import ControllerConfig
from metadata_quorum.features import api_features
from metadata_quorum.records import MetadataRecord
from raftlog.clock import SystemClock
from raftlog.consensus.config import QuorumConfig
from raftlog.consensus.core import KRaftCore
from raftlog.consensus.ready import Listener
from raftlog.net import KafkaProtocolServer
from raftlog.net.api_versions import ApiFeatures
from raftlog.net.connection_quotas import ConnectionLimits, ConnectionQuotas
from raftlog.net.sasl import SaslServerAuthenticator
from raftlog.runtime import wire
from raftlog.runtime.driver import RaftDriver
from raftlog.runtime.log_adapter import SegmentReplicatedLog
from raftlog.runtime.quorum_state_store import QuorumStateStore
from raftlog.runtime.transport import KafkaTransport, raft_handlers
from raftlog.security.oauthbearer import (
    BearerToken,
    JwtValidator,
    UnsecuredValidator,
    oauthbearer_server,
)
from raftlog.security.sasl import OAUTHBEARER, PLAIN, SaslServer, plain_server, scram_server
from raftlog.security.scram import ScramCredential

from .api.authorization import AclAuthorization
from .api.delegation_tokens import TokenAuthenticator
from .broker.clean_shutdown import take_previous_broker_epoch, write_clean_shutdown
from .broker.client_quotas import REQUEST_PERCENTAGE, ClientQuotaManager, QuotaWindow
from .broker.connection_rate_quotas import ConnectionCreationRates, IpConnectionRates
from .broker.controller_channel import QuorumControllerChannel
from .broker.data_side import attach_data_side
from .broker.lifecycle import BrokerLifecycle, LifecycleConfig, broker_endpoints
from .broker.log_configs import BROKER_CONFIG_DEFAULTS
from .broker.metadata_publisher import (
    BrokerMetadataListener,
    CombinedMetadataListener,
    MetadataPublisher,
    SnapshotPlanner,
)
from .broker.request_quotas import CONTROLLER_EXEMPT_API_KEYS, RequestQuota
from .broker.services import BrokerServices, DataSide
from .config import NO_EFFECT_SETTINGS, NodeConfig, delegation_token_settings
from .controller_acls import authorize_controller_handlers
from .controller_api import CONTROLLER_API_VERSIONS, controller_handlers
from .controller_mutation_quota import ControllerMutationQuotas
from .controller_service import ControllerService
from .oauth_jwks import JwksSource
from .storage_format import StorageError, check_formatted

if TYPE_CHECKING:
    from metadata_quorum.image import MetadataImage

    from .http.node_http import NodeHttp

__all__ = (
    "METADATA_PARTITION_DIR",
    "broker_lifecycle_config",
    "controller_config",
    "quorum_config",
    "run_node",
)

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
        min_insync_replicas=config.min_insync_replicas,
        auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
        leader_imbalance_per_broker_percentage=config.leader_imbalance_per_broker_percentage,
        leader_imbalance_check_interval_ms=config.leader_imbalance_check_interval_seconds * 1000,
        default_num_partitions=config.num_partitions,
        default_replication_factor=config.default_replication_factor,
        delete_topic_enable=config.delete_topic_enable,
        bootstrap_records=_bootstrap_records(config),
        delegation_tokens=delegation_token_settings(config),
    )


def _bootstrap_records(config: NodeConfig) -> tuple[MetadataRecord, ...]:
    """``storage format --add-scram``'s records (KIP-900); none without them."""
    try:
        return read_bootstrap(config.metadata_log_dir)
    except BootstrapError as exc:
        raise StorageError(str(exc)) from None


async def run_node(
    config: NodeConfig, *, data_side: DataSide | None = attach_data_side
) -> int:
    """Run the node until SIGTERM/SIGINT (0) or a failure (1).

    ``data_side`` attaches the broker's data side (partitions, replica
    fetchers, the Kafka API; `data_plane.broker.data_side`). Tests may pass
    None: a broker then registers, heartbeats, follows the metadata and
    serves ApiVersions only.

    Raises `data_plane.storage_format.StorageError` before starting anything
    if a log directory is unformatted or foreign.
    """
    cluster_id = check_formatted(config)
    clock = SystemClock()
    metadata_dir = os.path.join(config.metadata_log_dir, METADATA_PARTITION_DIR)
    os.makedirs(metadata_dir, exist_ok=True)
    replicated_log = SegmentReplicatedLog.open(metadata_dir, clock=clock)
    addresses = config.voter_addresses
    store = QuorumStateStore(metadata_dir, voters=addresses, cluster_id=cluster_id)
    quorum = quorum_config(config)

    # One metadata log, one replay: the driver's single listener (module doc).
    publisher = MetadataPublisher() if config.is_broker else None
    service: ControllerService | None = None
    broker_listener: BrokerMetadataListener | None = None
    listener: Listener
    if config.is_controller:
        service = ControllerService(
            config.node_id,
            controller_config(config, cluster_id),
            config.metadata_max_bytes_between_snapshots,
        )
        listener = service.listener
        if publisher is not None:
            controller = service.controller
            listener = CombinedMetadataListener(
                service.listener, lambda: controller.committed_image, publisher
            )
    else:
        assert publisher is not None
        broker_listener = BrokerMetadataListener(
            publisher, config.metadata_max_bytes_between_snapshots
        )
        listener = broker_listener

    http = _node_http(config, cluster_id, publisher, service)
    if http is not None:
        listener = http.wrap_listener(listener)

    # A node outside controller.quorum.voters is a Raft observer (KIP-595).
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
        security=config.security.controller_security(),
    )
    driver = RaftDriver(
        core=core,
        log=replicated_log,
        state_store=store,
        transport=transport,
        clock=clock,
        listener=listener,
    )
    servers: list[KafkaProtocolServer] = []
    jwks = await oauth_jwks_sources(config)
    # Every listener of the node shares one count of connections (Kafka's
    # ConnectionQuotas) and the same request size limit.
    listener_settings = {**BROKER_CONFIG_DEFAULTS, **dict(config.broker_settings)}
    # KIP-402: max.connections does not hold back the inter-broker listener
    # when the broker has others, as Kafka's
    # protected listener; nor the controller listeners, which Kafka serves
    # from a socket server of their own.
    brokers = config.broker_listeners
    inter_broker = [config.inter_broker_listener_name] if len(brokers) > 1 else []
    connection_quotas = ConnectionQuotas(ConnectionLimits.from_config(
        listener_settings, [listener.name for listener in config.listeners],
        exempt_listeners=frozenset([*inter_broker, *config.controller_listener_names])))
    # KIP-612: the node's and each listener's connection-creation rates.
    limits = connection_quotas.limits
    creation_rates = ConnectionCreationRates(
        QuotaWindow.from_config(listener_settings), node_rate=limits.max_connection_creation_rate,
        listener_rates=limits.per_listener_creation_rate,
        exempt_listeners=limits.exempt_listeners)
    if creation_rates.enabled:
        connection_quotas.creation_throttle = creation_rates.throttle_ms
    max_request_bytes = int(listener_settings["socket.request.max.bytes"])
    send_buffer_bytes = int(listener_settings["socket.send.buffer.bytes"])
    receive_buffer_bytes = int(listener_settings["socket.receive.buffer.bytes"])
    for setting in config.no_effect_settings:
        log.warning("%s is accepted for Kafka compatibility and has no effect: %s",
                    setting, NO_EFFECT_SETTINGS[setting])
    # Started once the broker has registered and caught up with the metadata
    # log (`_serve_when_caught_up`), as Kafka enables request processing only
    # then: before, Metadata and FindCoordinator would answer from a
    # half-replayed image (no topics, no unfenced brokers).
    broker_servers: list[KafkaProtocolServer] = []
    mutation_quotas: ControllerMutationQuotas | None = None
    if service is not None:
        service.attach(driver)
        handlers = raft_handlers(driver, cluster_id=cluster_id, endpoints=endpoints)
        mutation_quotas = ControllerMutationQuotas(QuotaWindow(
            config.controller_quota_window_num,
            config.controller_quota_window_size_seconds * 1000))
        handlers.update(controller_handlers(service, config.voters, mutation_quotas))
        if config.security.acls_enabled:
            handlers = authorize_controller_handlers(
                handlers,
                AclAuthorization(config.security.super_users,
                                 config.security.allow_everyone_if_no_acl),
                functools.partial(_committed_image, service))
        if http is not None:
            handlers = http.instrument(handlers)
        supported = dict(wire.SUPPORTED_VERSIONS)
        supported.update(CONTROLLER_API_VERSIONS)
        controller_listener = config.controller_listener
        servers.append(
            KafkaProtocolServer(
                controller_listener.host,
                controller_listener.port,
                handlers,
                supported=supported,
                listener_name=controller_listener.name,
                max_in_flight_per_connection=1000,
                max_request_bytes=max_request_bytes,
                send_buffer_bytes=send_buffer_bytes,
                receive_buffer_bytes=receive_buffer_bytes,
                connection_quotas=connection_quotas,
                authenticator=sasl_authenticator(
                    config, controller_listener.name,
                    functools.partial(_committed_image, service), jwks),
                features=functools.partial(_controller_features, service),
                request_quota=_controller_request_quota(service, listener_settings),
                **_tls_options(config, controller_listener.name),
            )
        )

    lifecycle: BrokerLifecycle | None = None
    services: BrokerServices | None = None
    if publisher is not None:
        # KIP-966: the epoch of the last clean shutdown, taken (the files go) now.
        previous_epoch = take_previous_broker_epoch(config.log_dirs)
        lifecycle = BrokerLifecycle(
            dataclasses.replace(broker_lifecycle_config(config, cluster_id),
                                previous_broker_epoch=previous_epoch),
            QuorumControllerChannel(
                addresses,
                lambda: publisher.leader_id,
                request_timeout_ms=quorum.request_timeout_ms,
                retry_backoff_ms=max(quorum.retry_backoff_ms, 50),
                client_id=f"raftlog-broker-{config.node_id}",
                security=config.security.controller_security(),
            ),
            publisher,
        )
        # KIP-612: ip entities' connection_creation_rate, from the metadata,
        # bound new connections on every listener of the node.
        ip_rates = IpConnectionRates(QuotaWindow.from_config(listener_settings))
        connection_quotas.rate_check = ip_rates.check

        def follow_ip_quotas(image: MetadataImage, previous: MetadataImage | None) -> None:
            if previous is None or image.client_quotas is not previous.client_quotas:
                ip_rates.update(image.client_quotas)

        lifecycle.subscribe(follow_ip_quotas)
        services = BrokerServices(config=config, cluster_id=cluster_id, metadata=lifecycle)
        if data_side is not None:
            await data_side(services)
        if http is not None:
            services.handlers = http.instrument(services.handlers)
            states = lifecycle
            http.attach(replicas=services.replicas, groups=services.groups,
                        subscribe=lifecycle.subscribe,
                        broker_state=lambda: (states.state.value, states.state.kafka_code))
        for broker_address in config.listeners:
            if broker_address.name in config.controller_listener_names:
                continue
            broker_servers.append(
                KafkaProtocolServer(
                    broker_address.host,
                    broker_address.port,
                    services.handlers,
                    supported=services.supported,
                    listener_name=broker_address.name,
                    max_in_flight_per_connection=1000,
                    max_request_bytes=max_request_bytes,
                    send_buffer_bytes=send_buffer_bytes,
                    receive_buffer_bytes=receive_buffer_bytes,
                    connection_quotas=connection_quotas,
                    authenticator=sasl_authenticator(
                        config, broker_address.name, functools.partial(_image_of, lifecycle),
                        jwks),
                    features=functools.partial(_features_of, lifecycle),
                    request_quota=(None if services.replicas is None
                                   else services.replicas.request_quota),
                    **_tls_options(config, broker_address.name),
                )
            )

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    driver.start()
    for server in servers:
        await server.start()
    if http is not None:
        # ``servers``: the broker listeners are appended as they start.
        http.attach(driver=driver, controller=service, connections=connection_quotas,
                    listeners=servers, mutation_quotas=mutation_quotas,
                    creation_rates=creation_rates if creation_rates.enabled else None)
        await http.start()
    log.info(
        "node %d (%s) of cluster %s: serving %s; metadata log %s (%s)",
        config.node_id,
        ",".join(sorted(config.process_roles)),
        cluster_id,
        ", ".join(f"{s.listener_name}://{s.host}:{s.port}" for s in servers),
        metadata_dir,
        "voter" if config.is_controller else "observer",
    )
    background: list[asyncio.Task[None]] = [
        asyncio.create_task(source.run(), name=f"jwks-{listener_name}")
        for listener_name, source in jwks.items()]
    if service is not None:
        background.append(asyncio.create_task(service.tick_loop(stop), name="controller-tick"))
        background.append(
            asyncio.create_task(service.snapshot_loop(stop), name="metadata-snapshots")
        )
    if broker_listener is not None:
        background.append(
            asyncio.create_task(
                _snapshot_loop(driver, broker_listener.snapshots, stop), name="metadata-snapshots"
            )
        )
    bind_errors: list[OSError] = []
    if broker_servers:
        assert publisher is not None
        background.append(asyncio.create_task(
            _serve_when_caught_up(publisher, broker_servers, servers, stop, bind_errors),
            name="broker-listeners"))
    waits: set[asyncio.Future[object]] = {
        asyncio.ensure_future(stop.wait()),
        asyncio.ensure_future(driver.wait_stopped()),
    }
    if lifecycle is not None:
        lifecycle.start()
        waits.add(asyncio.ensure_future(lifecycle.wait_failed()))
    replicas = services.replicas if services is not None else None
    if replicas is not None:
        waits.add(asyncio.ensure_future(replicas.wait_log_dir_failure()))
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    status = 0
    if driver.failure is not None:
        log.critical("raft driver failed: %r; exiting", driver.failure)
        status = 1
    if replicas is not None and replicas.offline_log_dirs:
        # Kafka's LogManager.handleLogDirFailure: a broker whose every log
        # dir failed shuts down (halts: no controlled shutdown, no clean
        # shutdown marker on the failed dir). With several dirs Kafka 3.7+
        # (KIP-858) keeps serving the others; this node stops either way.
        failed = sorted(replicas.offline_log_dirs)
        if len(failed) == len(replicas.log_dirs):
            log.critical("Shutdown broker because all log dirs in %s have failed",
                         ", ".join(replicas.log_dirs))
        else:
            log.critical("Shutdown broker because log dirs %s have failed (the others, "
                         "%s, are not served alone)", ", ".join(failed),
                         ", ".join(d for d in replicas.log_dirs if d not in failed))
        status = 1
    if lifecycle is not None and lifecycle.failure is not None:
        log.critical("broker lifecycle failed: %r; exiting", lifecycle.failure)
        status = 1
    if bind_errors:
        status = 1
    log.info("node %d shutting down", config.node_id)
    if lifecycle is not None and services is not None:
        if status == 0:
            # Controlled shutdown: leadership moves off this broker first (KIP-631).
            await lifecycle.controlled_shutdown(config.broker_session_timeout_ms)
        stopped_cleanly = True
        for hook in services.on_stop:
            try:
                await hook()
            except Exception:
                stopped_cleanly = False
                log.exception("broker shutdown hook %r failed", hook)
        if (status == 0 and stopped_cleanly and lifecycle.broker_epoch >= 0
                and not (replicas is not None and replicas.offline_log_dirs)):
            # Every log is flushed and closed: say so for the next start (KIP-966).
            write_clean_shutdown(config.log_dirs, lifecycle.broker_epoch)
        await lifecycle.stop()
    for task in background:
        task.cancel()
    await asyncio.gather(*background, return_exceptions=True)
    if http is not None:
        await http.stop()
    await driver.stop(resign=status == 0)
    for server in servers:
        server.close()
        await server.wait_closed()
    # After a failed fsync or a failed log dir holding it, the metadata log
    # gets no more writes (Kafka halts): no indexes, no clean-shutdown
    # marker; the next start recovers it.
    metadata_dir_failed = replicas is not None and any(
        os.path.abspath(config.metadata_log_dir) == os.path.abspath(d)
        for d in replicas.offline_log_dirs)
    try:
        replicated_log.close(clean=driver.failure is None and not metadata_dir_failed)
    except OSError as e:
        log.error("cannot close the metadata log cleanly: %s", e)
        status = status or 1
    for wait in waits:
        wait.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    log.info("node %d stopped", config.node_id)
    return status


def sasl_authenticator(
    config: NodeConfig, listener: str, image: Callable[[], MetadataImage],
    jwks: Mapping[str, JwksSource] | None = None,
) -> Callable[[], SaslServerAuthenticator] | None:
    """Each new connection's SASL exchange on ``listener``; None for a
    PLAINTEXT listener. PLAIN checks the JAAS config's users; SCRAM checks
    the credentials in the metadata image at the time of the login;
    OAUTHBEARER checks the token with the listener's validator (``jwks``:
    the KIP-768 ones' keys, by listener; `oauth_jwks_sources`)."""
    settings = config.security.listener_sasl(listener)
    if settings is None:
        return None
    token_settings = delegation_token_settings(config)
    # KIP-48: a broker listener's SCRAM logs delegation tokens in too.
    tokens = (TokenAuthenticator(token_settings, image, lambda: int(time.time() * 1000))
              if token_settings.enabled and listener not in config.controller_listener_names
              else None)
    factories: dict[str, Callable[[], SaslServer]] = {}
    for mechanism in settings.mechanisms:
        if mechanism == PLAIN:
            users = dict(settings.plain_users)
            factories[mechanism] = functools.partial(plain_server, users)
        elif mechanism == OAUTHBEARER:
            assert settings.oauthbearer is not None
            validator = settings.oauthbearer.validator
            validate: Callable[[str], BearerToken]
            if isinstance(validator, UnsecuredValidator):
                validate = functools.partial(_validate_unsecured, validator)
            else:
                validate = (jwks or {})[listener].validate
            factories[mechanism] = functools.partial(oauthbearer_server, validate)
        else:
            factories[mechanism] = functools.partial(
                scram_server, mechanism, functools.partial(_scram_lookup, image, mechanism),
                token_lookup=None if tokens is None else functools.partial(
                    tokens.lookup, mechanism))
    return functools.partial(SaslServerAuthenticator, factories,
                             config.security.failed_authentication_delay_ms,
                             config.security.max_receive_bytes,
                             max_reauth_ms=dict(settings.max_reauth_ms))


def _validate_unsecured(validator: UnsecuredValidator, token: str) -> BearerToken:
    return validator.validate(token, int(time.time() * 1000))


async def oauth_jwks_sources(config: NodeConfig) -> dict[str, JwksSource]:
    """Each served listener's KIP-768 JWKS, loaded (a ``file:`` one that
    fails stops start-up: `JwksError`)."""
    sources: dict[str, JwksSource] = {}
    for entry in config.security.sasl:
        if entry.oauthbearer is not None and isinstance(entry.oauthbearer.validator,
                                                        JwtValidator):
            source = JwksSource(entry.oauthbearer.validator)
            await source.start()
            sources[entry.listener] = source
    return sources


def _tls_options(config: NodeConfig, listener: str) -> dict[str, Any]:
    """A TLS listener's server context and principal (none for PLAINTEXT
    and SASL_PLAINTEXT)."""
    settings = config.security.listener_tls(listener)
    if settings is None:
        return {}
    return {"tls": settings.server, "tls_principal": settings.principal}


def _controller_request_quota(service: ControllerService,
                              settings: Mapping[str, str]) -> RequestQuota:
    """KIP-124 on the controller listener: its own sensors, the quotas of
    the committed image (`data_plane.broker.request_quotas`)."""
    manager = ClientQuotaManager(REQUEST_PERCENTAGE, QuotaWindow.from_config(settings))

    def refresh() -> None:  # cheap while the image's quotas are the same object
        manager.update(service.controller.committed_image.client_quotas)

    return RequestQuota(manager, lambda: int(time.time() * 1000),
                        exempt=CONTROLLER_EXEMPT_API_KEYS, refresh=refresh)


def _committed_image(service: ControllerService) -> MetadataImage:
    return service.controller.committed_image


def _image_of(lifecycle: BrokerLifecycle) -> MetadataImage:
    return lifecycle.image


def _controller_features(service: ControllerService) -> ApiFeatures:
    return api_features(service.controller.committed_image)


def _features_of(lifecycle: BrokerLifecycle) -> ApiFeatures:
    return api_features(lifecycle.image)


def _scram_lookup(image: Callable[[], MetadataImage], mechanism: str,
                  user: str) -> ScramCredential | None:
    return image().scram_credential(user, mechanism)


async def _serve_when_caught_up(
    publisher: MetadataPublisher, broker_servers: list[KafkaProtocolServer],
    started: list[KafkaProtocolServer], stop: asyncio.Event, errors: list[OSError],
) -> None:
    """Open the broker listeners once the publisher's gate opens; a listener
    that cannot bind stops the node with exit status 1 (``errors``)."""
    await publisher.wait_gate_open()
    for server in broker_servers:
        try:
            await server.start()
        except OSError as e:
            log.critical("cannot listen on %s:%d: %s; exiting", server.host, server.port, e)
            errors.append(e)
            stop.set()
            return
        started.append(server)
    log.info("caught up with the metadata log: serving %s",
             ", ".join(f"{s.listener_name}://{s.host}:{s.port}" for s in broker_servers))


def broker_lifecycle_config(config: NodeConfig, cluster_id: str) -> LifecycleConfig:
    """The broker lifecycle settings of ``config`` (a fresh incarnation id)."""
    return LifecycleConfig(
        broker_id=config.node_id,
        cluster_id=cluster_id,
        listeners=broker_endpoints(
            [(listener.name, listener.host, listener.port) for listener in config.broker_listeners]
        ),
        rack=config.broker_rack,
        heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
        request_timeout_ms=max(config.quorum_request_timeout_ms, 2000),
    )


def _node_http(
    config: NodeConfig,
    cluster_id: str,
    publisher: MetadataPublisher | None,
    service: ControllerService | None,
) -> NodeHttp | None:
    """The HTTP surface if ``http.listener`` is set (imported only then: aiohttp
    and prometheus-client are needed only by nodes that serve HTTP)."""
    if config.http_listener is None:
        return None
    from .http.node_http import NodeHttp

    def image() -> MetadataImage:
        if publisher is not None:
            return publisher.image
        assert service is not None
        return service.controller.committed_image

    return NodeHttp(config, cluster_id, image)


async def _snapshot_loop(driver: RaftDriver, planner: SnapshotPlanner, stop: asyncio.Event) -> None:
    """A broker-only node's metadata snapshots (Kafka brokers write their own too)."""
    while not stop.is_set():
        await asyncio.sleep(0.1)
        due, planner.due = planner.due, None
        if due is None:
            continue
        end_offset, epoch, data = due
        try:
            snapshot_id = await driver.create_snapshot(end_offset, data, epoch)
            log.info("created metadata snapshot %s (%d bytes)", snapshot_id, len(data))
        except Exception as exc:  # e.g. beyond the high watermark yet: next time
            log.warning("metadata snapshot at %d failed: %s", end_offset, exc)
