"""The broker's data side for `data_plane.node.run_node(data_side=...)`:
the replica manager, the follower fetchers and the Kafka API handlers,
attached to the node's `BrokerServices`."""

from __future__ import annotations

from data_plane.broker.fetcher import ReplicaFetcherManager, fetcher_client_factory
from data_plane.broker.replica_manager import ReplicaManager
from data_plane.broker.services import BrokerServices
from data_plane.config import delegation_token_settings
from data_plane.kafka_api import BROKER_API_VERSIONS, BrokerApiContext, broker_handlers
from data_plane.security_config import STANDARD_AUTHORIZER
from data_plane.tls_reload import KeystoreReloader

__all__ = ("attach_data_side",)


async def attach_data_side(services: BrokerServices) -> None:
    """Start the data side on ``services`` (a `data_plane.broker.services.DataSide`)."""
    config = services.config
    static = {**dict(config.broker_settings),
              "min.insync.replicas": str(config.min_insync_replicas),
              "auto.create.topics.enable": "true" if config.auto_create_topics_enable else "false",
              "unclean.leader.election.enable":
                  "true" if config.unclean_leader_election_enable else "false"}
    settings = config.security
    if settings.acls_enabled:  # read by data_plane.api.authorization
        static.update({"authorizer.class.name": STANDARD_AUTHORIZER,
                       "super.users": ";".join(sorted(settings.super_users)),
                       "allow.everyone.if.no.acl.found":
                           "true" if settings.allow_everyone_if_no_acl else "false"})
    # The inter-broker listener (inter.broker.listener.name, else the first
    # broker listener) is what followers fetch on and brokers call each other
    # on, with TLS and SASL as the listener's settings say.
    # Client requests are answered with the addresses of the listener each
    # came in on (RequestContext).
    listener_name = config.inter_broker_listener_name
    security = settings.client_security(listener_name)
    replicas = ReplicaManager(services.metadata, log_dirs=config.log_dirs, static_config=static)
    fetchers = ReplicaFetcherManager(replicas, listener_name=listener_name,
                                     client_factory=fetcher_client_factory(security))
    # KIP-226: a TLS listener's keystore may be replaced through the
    # metadata log; applied as each image is replayed.
    keystores = (KeystoreReloader(settings, config.node_id)
                 if any(tls.server is not None for tls in settings.tls) else None)
    if keystores is not None:
        services.metadata.subscribe(lambda image, previous: keystores.apply(image))
    api = BrokerApiContext(services.metadata, replicas, services.cluster_id, listener_name,
                           security=security, keystores=keystores,
                           delegation_tokens=delegation_token_settings(config),
                           listener_protocols={listener.name: settings.protocol(listener.name)
                                               for listener in config.listeners})
    services.handlers.update(broker_handlers(api))
    services.supported.update(BROKER_API_VERSIONS)
    services.replicas = replicas
    services.groups = api.coordinators.groups
    replicas.start()
    fetchers.start()

    async def stop() -> None:
        await fetchers.close()
        await replicas.close()

    services.on_stop.append(stop)
